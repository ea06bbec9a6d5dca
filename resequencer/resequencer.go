package resequencer

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/lockreg/lockreg/groupstore"
)

// outputNamespace seeds the name-based UUIDs of output messages.
var outputNamespace = uuid.NewSHA1(uuid.NameSpaceURL, []byte("https://github.com/lockreg/lockreg/resequencer"))

// claimBatch is how many due groups the timeout runner claims at a time.
const claimBatch = 100

// Resequencer releases the messages of each group in sequence order. Make
// one with [New]; it is safe for concurrent use by the router's handler
// goroutines and the timeout runner.
//
// A released message keeps its payload and metadata; its UUID is replaced
// by a name-based (SHA-1) UUID of the group's incarnation
// (groupstore.Group.ID) and its sequence number, so every attempt to
// publish it, by any instance, carries the same UUID.
type Resequencer struct {
	cfg       Config
	loggerSet bool
}

// New returns a resequencer configured by cfg after applying defaults. It
// does no I/O. It returns an error wrapping ErrInvalidConfig for an invalid
// configuration.
func New(cfg Config) (*Resequencer, error) {
	loggerSet := cfg.Logger != nil
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if !loggerSet {
		cfg.Logger = watermill.NewSlogLogger(nil)
	}
	return &Resequencer{cfg: cfg, loggerSet: loggerSet}, nil
}

// AddHandler adds the resequencer to r as a consumer handler named
// handlerName on subscribeTopic, and ties the timeout runner to it: the
// runner starts when the handler subscribes and stops, and is waited for,
// when the handler's subscription ends or the subscriber is closed.
// Without a Config.Logger the resequencer logs to r's logger. It panics, as
// r.AddConsumerHandler does, on a duplicate handler name. Add a
// resequencer to one router only.
func (q *Resequencer) AddHandler(r *message.Router, handlerName, subscribeTopic string, sub message.Subscriber) *message.Handler {
	if !q.loggerSet {
		q.cfg.Logger = r.Logger()
	}
	q.cfg.Logger = q.cfg.Logger.With(watermill.LogFields{"resequencer": handlerName})
	return r.AddConsumerHandler(handlerName, subscribeTopic, &runnerSubscriber{Subscriber: sub, q: q}, q.Handle)
}

// Handle is the resequencer's [message.NoPublishHandlerFunc]. Under the
// group lock it adds msg to its group and publishes whatever the group can
// release, then records the release; it returns after that.
//
// A nil error means msg is durably in the store, released, recognised as a
// redelivery, or discarded: a message with invalid sequence metadata, a
// late message (at or below the last released sequence number, or for a
// complete group) and a duplicate (a second message with a number the
// group holds) go to the discard topic at once, so they never hold up a
// release. An error means msg must be redelivered: a lock timeout
// (ErrLockTimeout) or lost lock (ErrLockLost), a store or publish failure,
// ErrNoCorrelationKey or ErrNoMessageID.
//
// It costs one lock acquisition and release, one store Add and one Get
// (which reads the group's unreleased messages); a release or discard adds
// a Publish and an Update (or Remove).
func (q *Resequencer) Handle(msg *message.Message) error {
	ctx := msg.Context()
	key := q.cfg.Correlation(msg)
	if key == "" {
		return fmt.Errorf("%w: message %s", ErrNoCorrelationKey, msg.UUID)
	}
	id := q.cfg.MessageID(msg)
	if id == "" {
		return fmt.Errorf("%w: message %s", ErrNoMessageID, msg.UUID)
	}
	if _, _, problem := q.cfg.sequence(msg.Metadata); problem != "" {
		return q.discard(ctx, key, []*message.Message{withReason(msg.Copy(), reasonInvalid+problem)})
	}
	lctx, unlock, err := q.lock(ctx, key, q.cfg.LockTimeout)
	if err != nil {
		return err
	}
	defer unlock()

	g, outcome, err := q.cfg.Store.Add(lctx, key, groupstore.Message{UUID: id, Metadata: msg.Metadata, Payload: msg.Payload}, q.cfg.GroupTimeout)
	if err != nil {
		return q.fail(lctx, fmt.Errorf("resequencer: adding message %s to group %q: %w", msg.UUID, key, err))
	}
	switch outcome {
	case groupstore.Rejected:
		return q.fail(lctx, q.discard(lctx, key, []*message.Message{withReason(msg.Copy(), reasonLate)}))
	case groupstore.Duplicate:
		q.cfg.Logger.Debug("Redelivered message ignored", watermill.LogFields{"message_uuid": msg.UUID, "group": key})
		if g.Complete {
			return nil
		}
		// An earlier attempt may have failed between adding and releasing.
	}
	sg, err := q.cfg.Store.Get(lctx, key)
	if err != nil {
		return q.fail(lctx, fmt.Errorf("resequencer: reading group %q: %w", key, err))
	}
	return q.fail(lctx, q.apply(lctx, sg, q.cfg.planFor(sg, false), false))
}

// lock takes the group lock of key, waiting at most wait. It returns a
// context that ends, with cause ErrLockLost, when the hold ends or may have
// ended, and the function that releases the lock.
func (q *Resequencer) lock(ctx context.Context, key string, wait time.Duration) (context.Context, func(), error) {
	l := q.cfg.Locks.Obtain(q.cfg.LockPrefix + key)
	wctx, cancel := context.WithTimeout(ctx, wait)
	ok, err := l.TryLockContext(wctx)
	cancel()
	if err != nil {
		return nil, nil, fmt.Errorf("resequencer: locking group %q: %w", key, err)
	}
	if !ok {
		return nil, nil, fmt.Errorf("%w: group %q after %v", ErrLockTimeout, key, wait)
	}
	held, lost := context.WithCancelCause(ctx)
	done, stop := l.Done(), make(chan struct{})
	watching := make(chan struct{})
	go func() {
		defer close(watching)
		select {
		case <-done:
			lost(ErrLockLost)
		case <-stop:
		}
	}()
	return held, func() {
		close(stop)
		<-watching
		lost(nil)
		// The message context ends with its ack; the unlock must outlive it.
		if err := l.UnlockContext(context.WithoutCancel(ctx)); err != nil {
			q.cfg.Logger.Error("Unlocking group failed; another instance may have changed it", err,
				watermill.LogFields{"group": key})
		}
	}, nil
}

// fail marks err as caused by a lost lock when the lock context says so.
func (q *Resequencer) fail(lctx context.Context, err error) error {
	if err != nil && errors.Is(context.Cause(lctx), ErrLockLost) && !errors.Is(err, ErrLockLost) {
		return fmt.Errorf("%w: %w", ErrLockLost, err)
	}
	return err
}

// outputUUID is the UUID of the release of sequence number seq of the
// group incarnation groupID.
func outputUUID(groupID string, seq int64) string {
	return uuid.NewSHA1(outputNamespace, []byte(groupID+"/"+strconv.FormatInt(seq, 10))).String()
}

// toMessage makes a Watermill message of a stored one.
func toMessage(id string, m groupstore.Message) *message.Message {
	wm := message.NewMessage(id, m.Payload)
	for k, v := range m.Metadata {
		wm.Metadata.Set(k, v)
	}
	return wm
}

func withReason(m *message.Message, reason string) *message.Message {
	m.Metadata.Set(DiscardReasonKey, reason)
	return m
}

// apply carries out p for sg under the group lock: it publishes the
// release, discards, and then records the outcome in the store, so that
// a failure anywhere leaves the group as it was for the next attempt.
func (q *Resequencer) apply(ctx context.Context, sg groupstore.Group, p plan, expired bool) error {
	if len(p.release) > 0 {
		outs := make([]*message.Message, len(p.release))
		for i, e := range p.release {
			outs[i] = toMessage(outputUUID(sg.ID, e.seq), e.msg)
			outs[i].SetContext(ctx)
		}
		if err := context.Cause(ctx); err != nil {
			return fmt.Errorf("resequencer: before publishing group %q: %w", sg.Key, err)
		}
		if err := q.cfg.Publisher.Publish(q.cfg.OutputTopic, outs...); err != nil {
			return fmt.Errorf("resequencer: publishing sequence %d..%d of group %q: %w",
				p.release[0].seq, p.release[len(p.release)-1].seq, sg.Key, err)
		}
	}
	if len(p.discard) > 0 {
		outs := make([]*message.Message, len(p.discard))
		for i, d := range p.discard {
			outs[i] = withReason(toMessage(d.msg.UUID, d.msg), d.reason)
		}
		if err := q.discard(ctx, sg.Key, outs); err != nil {
			return err
		}
	}
	var err error
	switch {
	case expired && q.cfg.ExpireGroupsOnTimeout, p.complete && q.cfg.ExpireGroupsOnCompletion:
		err = q.cfg.Store.Remove(ctx, sg.Key, sg.Version)
	case expired || p.complete:
		u := groupstore.Update{IfVersion: sg.Version, ReleaseAll: true, Complete: true, ClearTimeout: true,
			SetLastReleasedSequence: true, LastReleasedSequence: p.last}
		if q.cfg.MinimumTimeoutForEmptyGroups > 0 {
			u.ClearTimeout, u.Timeout = false, q.cfg.MinimumTimeoutForEmptyGroups
		}
		err = q.cfg.Store.Update(ctx, sg.Key, u)
	case p.changes():
		err = q.cfg.Store.Update(ctx, sg.Key, groupstore.Update{IfVersion: sg.Version, Release: p.ids(),
			SetLastReleasedSequence: true, LastReleasedSequence: p.last})
	}
	if err != nil {
		return fmt.Errorf("resequencer: recording the release of group %q: %w", sg.Key, err)
	}
	return nil
}

// discard sends msgs of group key to the discard topic, or logs them.
func (q *Resequencer) discard(ctx context.Context, key string, msgs []*message.Message) error {
	if q.cfg.DiscardPublisher == nil {
		for _, m := range msgs {
			q.cfg.Logger.Info("Message discarded", watermill.LogFields{"message_uuid": m.UUID, "group": key,
				"reason": m.Metadata.Get(DiscardReasonKey), "payload": string(m.Payload)})
		}
		return nil
	}
	for _, m := range msgs {
		m.SetContext(ctx)
	}
	if err := context.Cause(ctx); err != nil {
		return fmt.Errorf("resequencer: before discarding from group %q: %w", key, err)
	}
	if err := q.cfg.DiscardPublisher.Publish(q.cfg.DiscardTopic, msgs...); err != nil {
		return fmt.Errorf("resequencer: discarding %d message(s) of group %q: %w", len(msgs), key, err)
	}
	return nil
}

// RunTimeouts expires due groups until ctx is done, then returns nil. Every
// PollInterval it claims due groups from the store and, for each, takes the
// group lock (waiting at most PollInterval or LockTimeout, whichever is
// shorter; a busy group is left to a later round), checks that the group
// has not changed since it fell due, and expires it: a kept complete group
// is removed (MinimumTimeoutForEmptyGroups); otherwise its messages are
// released in order, skipping gaps, or discarded
// (SendPartialResultOnExpiry), and the group is completed or removed
// (ExpireGroupsOnTimeout). Failures are logged and retried when the
// claim's lease ends.
//
// Several runners, in one process or many, may share a store: each due
// group goes to one of them at a time. [Resequencer.AddHandler] runs it
// for the handler's lifetime; call it yourself when wiring Handle by hand.
func (q *Resequencer) RunTimeouts(ctx context.Context) error {
	t := time.NewTicker(q.cfg.PollInterval)
	defer t.Stop()
	for {
		q.expireDue(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// expireDue claims and expires due groups until none is left or ctx ends.
func (q *Resequencer) expireDue(ctx context.Context) {
	for ctx.Err() == nil {
		claims, err := q.cfg.Store.ClaimDue(ctx, claimBatch, 2*q.cfg.LockTimeout+q.cfg.PollInterval)
		if err != nil {
			if ctx.Err() == nil {
				q.cfg.Logger.Error("Claiming due groups failed", err, nil)
			}
			return
		}
		for _, c := range claims {
			if err := q.expire(ctx, c); err != nil && ctx.Err() == nil {
				q.cfg.Logger.Error("Expiring group failed; retrying later", err, watermill.LogFields{"group": c.Key})
			}
		}
		if len(claims) < claimBatch {
			return
		}
	}
}

// expire handles one claimed group under its lock.
func (q *Resequencer) expire(ctx context.Context, c groupstore.Claim) error {
	lctx, unlock, err := q.lock(ctx, c.Key, min(q.cfg.LockTimeout, q.cfg.PollInterval))
	if errors.Is(err, ErrLockTimeout) {
		return nil // busy: whoever holds it changes it, or the claim lapses
	}
	if err != nil {
		return err
	}
	defer unlock()
	sg, err := q.cfg.Store.Get(lctx, c.Key)
	if errors.Is(err, groupstore.ErrNotFound) {
		return nil
	}
	if err != nil {
		return q.fail(lctx, fmt.Errorf("resequencer: reading group %q: %w", c.Key, err))
	}
	if sg.Version != c.Version {
		return nil // changed since it fell due: its new due time stands
	}
	if sg.Complete {
		err := q.cfg.Store.Remove(lctx, sg.Key, sg.Version)
		if err != nil && !errors.Is(err, groupstore.ErrNotFound) {
			return q.fail(lctx, fmt.Errorf("resequencer: removing group %q: %w", sg.Key, err))
		}
		return nil
	}
	return q.fail(lctx, q.apply(lctx, sg, q.cfg.planFor(sg, true), true))
}

// runnerSubscriber runs the timeout runner for as long as the handler's
// subscription lives.
type runnerSubscriber struct {
	message.Subscriber
	q *Resequencer

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

func (s *runnerSubscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	ch, err := s.Subscriber.Subscribe(ctx, topic)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cancel == nil {
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		s.cancel, s.done = cancel, done
		go func() {
			defer close(done)
			_ = s.q.RunTimeouts(rctx)
		}()
	}
	return ch, nil
}

// Close stops the runner, waits for it, and closes the subscriber.
func (s *runnerSubscriber) Close() error {
	s.mu.Lock()
	cancel, done := s.cancel, s.done
	s.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
	return s.Subscriber.Close()
}

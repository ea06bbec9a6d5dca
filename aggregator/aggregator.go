package aggregator

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
var outputNamespace = uuid.NewSHA1(uuid.NameSpaceURL, []byte("https://github.com/lockreg/lockreg/aggregator"))

// claimBatch is how many due groups the timeout runner claims at a time.
const claimBatch = 100

// Aggregator combines the messages of each group into one output message.
// Make one with [New]; it is safe for concurrent use by the router's
// handler goroutines and the timeout runner.
//
// Output message UUIDs are name-based (SHA-1) UUIDs of the group's ID and
// the release's ordinal, so every attempt to publish one release, including
// attempts by another instance after a crash, carries the same UUID.
type Aggregator struct {
	cfg       Config
	loggerSet bool
}

// New returns an aggregator configured by cfg after applying defaults. It
// does no I/O. It returns an error wrapping ErrInvalidConfig for an invalid
// configuration.
func New(cfg Config) (*Aggregator, error) {
	loggerSet := cfg.Logger != nil
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if !loggerSet {
		cfg.Logger = watermill.NewSlogLogger(nil)
	}
	return &Aggregator{cfg: cfg, loggerSet: loggerSet}, nil
}

// AddHandler adds the aggregator to r as a consumer handler named
// handlerName on subscribeTopic, and ties the timeout runner to it: the
// runner starts when the handler subscribes and stops, and is waited for,
// when the handler's subscription ends (router closed, handler stopped) or
// when the subscriber is closed. Without a Config.Logger the aggregator
// logs to r's logger. It panics, as r.AddConsumerHandler does, on a
// duplicate handler name. Add an aggregator to one router only.
func (a *Aggregator) AddHandler(r *message.Router, handlerName, subscribeTopic string, sub message.Subscriber) *message.Handler {
	if !a.loggerSet {
		a.cfg.Logger = r.Logger()
	}
	a.cfg.Logger = a.cfg.Logger.With(watermill.LogFields{"aggregator": handlerName})
	return r.AddConsumerHandler(handlerName, subscribeTopic, &runnerSubscriber{Subscriber: sub, a: a}, a.Handle)
}

// Handle is the aggregator's [message.NoPublishHandlerFunc]: it adds msg to
// its group under the group lock and, when the release strategy says so,
// publishes the group's output and completes the group, before returning.
// A nil error means msg is durably in the store (or recognised as a
// redelivery, or discarded as late) and may be acked. An error means msg
// must be redelivered: a lock timeout (ErrLockTimeout), a store or publish
// failure, ErrNoCorrelationKey or ErrNoMessageID.
//
// It costs one lock acquisition and release, one store Add, and on release
// one Get, one Publish and one Update (or Remove); ReleaseWhen adds a Get
// per message.
func (a *Aggregator) Handle(msg *message.Message) error {
	ctx := msg.Context()
	key := a.cfg.Correlation(msg)
	if key == "" {
		return fmt.Errorf("%w: message %s", ErrNoCorrelationKey, msg.UUID)
	}
	id := a.cfg.MessageID(msg)
	if id == "" {
		return fmt.Errorf("%w: message %s", ErrNoMessageID, msg.UUID)
	}
	unlock, err := a.lock(ctx, key, a.cfg.LockTimeout)
	if err != nil {
		return err
	}
	defer unlock()

	timeout := a.cfg.GroupTimeout
	g, outcome, err := a.cfg.Store.Add(ctx, key, groupstore.Message{UUID: id, Metadata: msg.Metadata, Payload: msg.Payload}, timeout)
	if err != nil {
		return fmt.Errorf("aggregator: adding message %s to group %q: %w", msg.UUID, key, err)
	}
	switch outcome {
	case groupstore.Rejected:
		return a.discard(ctx, key, "late", msg)
	case groupstore.Duplicate:
		a.cfg.Logger.Debug("Redelivered message ignored", watermill.LogFields{"message_uuid": msg.UUID, "group": key})
		if g.Complete {
			return nil
		}
		// An earlier attempt may have failed between adding and releasing.
	}
	var loaded *groupstore.Group
	var view *Group
	if a.cfg.Release.needsMessages() {
		sg, err := a.cfg.Store.Get(ctx, key)
		if err != nil {
			return fmt.Errorf("aggregator: reading group %q: %w", key, err)
		}
		loaded, view = &sg, toGroup(sg, false)
	}
	if !a.cfg.Release.canRelease(g.Size, msg, view) {
		return nil
	}
	if loaded == nil {
		sg, err := a.cfg.Store.Get(ctx, key)
		if err != nil {
			return fmt.Errorf("aggregator: reading group %q: %w", key, err)
		}
		loaded = &sg
	}
	return a.release(ctx, *loaded, toGroup(*loaded, false))
}

// lock takes the group lock of key, waiting at most wait, and returns its
// release.
func (a *Aggregator) lock(ctx context.Context, key string, wait time.Duration) (func(), error) {
	l := a.cfg.Locks.Obtain(a.cfg.LockPrefix + key)
	lctx, cancel := context.WithTimeout(ctx, wait)
	ok, err := l.TryLockContext(lctx)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("aggregator: locking group %q: %w", key, err)
	}
	if !ok {
		return nil, fmt.Errorf("%w: group %q after %v", ErrLockTimeout, key, wait)
	}
	return func() {
		// The message context ends with its ack; the unlock must outlive it.
		if err := l.UnlockContext(context.WithoutCancel(ctx)); err != nil {
			a.cfg.Logger.Error("Unlocking group failed; another instance may have changed it", err,
				watermill.LogFields{"group": key})
		}
	}, nil
}

// toGroup converts a stored group to the view of strategies and outputs.
func toGroup(sg groupstore.Group, expired bool) *Group {
	g := &Group{Key: sg.Key, Expired: expired, Messages: make([]*message.Message, len(sg.Messages))}
	for i, m := range sg.Messages {
		wm := message.NewMessage(m.UUID, m.Payload)
		for k, v := range m.Metadata {
			wm.Metadata.Set(k, v)
		}
		g.Messages[i] = wm
	}
	return g
}

// outputUUID is the UUID of the next release of sg.
func outputUUID(sg groupstore.Group) string {
	return uuid.NewSHA1(outputNamespace, []byte(sg.ID+"/"+strconv.FormatInt(sg.Releases+1, 10))).String()
}

// release publishes the output of g (the view of sg) and completes sg.
func (a *Aggregator) release(ctx context.Context, sg groupstore.Group, g *Group) error {
	out, err := a.cfg.Output(*g)
	if err != nil {
		return fmt.Errorf("aggregator: output of group %q: %w", sg.Key, err)
	}
	if out == nil {
		return fmt.Errorf("aggregator: output of group %q: the output function returned nil", sg.Key)
	}
	out.UUID = outputUUID(sg)
	out.SetContext(ctx)
	if err := a.cfg.Publisher.Publish(a.cfg.OutputTopic, out); err != nil {
		return fmt.Errorf("aggregator: publishing output %s of group %q: %w", out.UUID, sg.Key, err)
	}
	return a.complete(ctx, sg)
}

// complete marks sg released and complete, or removes it.
func (a *Aggregator) complete(ctx context.Context, sg groupstore.Group) error {
	var err error
	if a.cfg.ExpireGroupsOnCompletion {
		err = a.cfg.Store.Remove(ctx, sg.Key, sg.Version)
	} else {
		u := groupstore.Update{IfVersion: sg.Version, ReleaseAll: true, Complete: true, ClearTimeout: true}
		if a.cfg.MinimumTimeoutForEmptyGroups > 0 {
			u.ClearTimeout, u.Timeout = false, a.cfg.MinimumTimeoutForEmptyGroups
		}
		err = a.cfg.Store.Update(ctx, sg.Key, u)
	}
	if err != nil {
		return fmt.Errorf("aggregator: completing group %q: %w", sg.Key, err)
	}
	return nil
}

// discard sends msgs of group key to the discard topic, or logs them.
func (a *Aggregator) discard(ctx context.Context, key, reason string, msgs ...*message.Message) error {
	if a.cfg.DiscardPublisher == nil {
		for _, m := range msgs {
			a.cfg.Logger.Info("Message discarded", watermill.LogFields{
				"message_uuid": m.UUID, "group": key, "reason": reason, "payload": string(m.Payload)})
		}
		return nil
	}
	out := make([]*message.Message, len(msgs))
	for i, m := range msgs {
		c := m.Copy()
		c.Metadata.Set(DiscardReasonKey, reason)
		c.SetContext(ctx)
		out[i] = c
	}
	if err := a.cfg.DiscardPublisher.Publish(a.cfg.DiscardTopic, out...); err != nil {
		return fmt.Errorf("aggregator: discarding %d message(s) of group %q: %w", len(msgs), key, err)
	}
	return nil
}

// RunTimeouts expires due groups until ctx is done, then returns nil. Every
// PollInterval it claims due groups from the store and, for each, takes the
// group lock (waiting at most PollInterval or LockTimeout, whichever is
// shorter; a busy group is left to a later round), checks that the group
// has not changed since it fell due, and expires it: a kept completed group
// is removed (MinimumTimeoutForEmptyGroups); a group the release strategy
// accepts on expiry is released; otherwise a partial result is sent or the
// messages are discarded (SendPartialResultOnExpiry), and the group is
// completed. Failures are logged and retried when the claim's lease ends.
//
// Several runners, in one process or many, may share a store: each due
// group goes to one of them at a time. [Aggregator.AddHandler] runs it for
// the handler's lifetime; call it yourself when wiring Handle by hand.
func (a *Aggregator) RunTimeouts(ctx context.Context) error {
	t := time.NewTicker(a.cfg.PollInterval)
	defer t.Stop()
	for {
		a.expireDue(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (a *Aggregator) claimLease() time.Duration {
	return 2*a.cfg.LockTimeout + a.cfg.PollInterval
}

// expireDue claims and expires due groups until none is left or ctx ends.
func (a *Aggregator) expireDue(ctx context.Context) {
	for ctx.Err() == nil {
		claims, err := a.cfg.Store.ClaimDue(ctx, claimBatch, a.claimLease())
		if err != nil {
			if ctx.Err() == nil {
				a.cfg.Logger.Error("Claiming due groups failed", err, nil)
			}
			return
		}
		for _, c := range claims {
			if err := a.expire(ctx, c); err != nil && ctx.Err() == nil {
				a.cfg.Logger.Error("Expiring group failed; retrying later", err, watermill.LogFields{"group": c.Key})
			}
		}
		if len(claims) < claimBatch {
			return
		}
	}
}

// expire handles one claimed group under its lock.
func (a *Aggregator) expire(ctx context.Context, c groupstore.Claim) error {
	unlock, err := a.lock(ctx, c.Key, min(a.cfg.LockTimeout, a.cfg.PollInterval))
	if errors.Is(err, ErrLockTimeout) {
		return nil // busy: whoever holds it changes it, or the claim lapses
	}
	if err != nil {
		return err
	}
	defer unlock()
	sg, err := a.cfg.Store.Get(ctx, c.Key)
	if errors.Is(err, groupstore.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("aggregator: reading group %q: %w", c.Key, err)
	}
	if sg.Version != c.Version {
		return nil // changed since it fell due: its new due time stands
	}
	if sg.Complete || sg.Size == 0 {
		err := a.cfg.Store.Remove(ctx, sg.Key, sg.Version)
		if err != nil && !errors.Is(err, groupstore.ErrNotFound) {
			return fmt.Errorf("aggregator: removing group %q: %w", sg.Key, err)
		}
		return nil
	}
	g := toGroup(sg, true)
	switch {
	case a.cfg.Release.canRelease(sg.Size, nil, g):
		if a.cfg.Release.kind == releaseTimeout {
			g.Expired = false
		}
		return a.release(ctx, sg, g)
	case a.cfg.SendPartialResultOnExpiry:
		return a.release(ctx, sg, g)
	}
	if err := a.discard(ctx, sg.Key, "expired", g.Messages...); err != nil {
		return err
	}
	return a.complete(ctx, sg)
}

// runnerSubscriber runs the timeout runner for as long as the handler's
// subscription lives.
type runnerSubscriber struct {
	message.Subscriber
	a *Aggregator

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
			_ = s.a.RunTimeouts(rctx)
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

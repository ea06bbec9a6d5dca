package aggregator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/lockreg/lockreg/groupstore"
	"github.com/lockreg/lockreg/internal/grouphandler"
	"github.com/lockreg/lockreg/sequence"
)

// Aggregator combines the messages of each group into one output message.
// Make one with [New]; it is safe for concurrent use by the router's
// handler goroutines and the timeout runner.
//
// Output message UUIDs are name-based (SHA-1) UUIDs of the group's ID and
// the release's ordinal, so every attempt to publish one release, including
// attempts by another instance after a crash, carries the same UUID.
type Aggregator struct {
	// core holds the settings the aggregator shares with the resequencer,
	// defaulted, and does the work that does not depend on the strategy.
	core *grouphandler.Core

	// The aggregator's own settings, from its Config.
	strategy           ReleaseStrategy
	output             func(Group) (*message.Message, error)
	partialOnExpiry    bool // SendPartialResultOnExpiry
	removeOnCompletion bool // ExpireGroupsOnCompletion
	popSequence        bool // !DisablePopSequence
	sendAfterUnlock    bool // ReleaseLockBeforeSend
	timeoutFunc        bool // GroupTimeoutFunc != nil: every unreleasing message reschedules
	// sendRetry is how long after closing a group for a send after the
	// unlock the timeout runner finishes the release if nobody has.
	sendRetry time.Duration
	// noSizeOutcome says what becomes of a group whose first message has
	// no sequence size, for checkSequenceSize.
	noSizeOutcome string

	// reported holds the groups reported for lacking sequence sizes.
	reported reportedGroups
}

// New returns an aggregator configured by cfg after applying defaults. It
// does no I/O. It returns an error wrapping ErrInvalidConfig for an invalid
// configuration.
func New(cfg Config) (*Aggregator, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	outcome := "the group waits forever: no GroupTimeout"
	switch {
	case cfg.GroupTimeoutFunc != nil:
		outcome = "GroupTimeoutFunc decides when the group expires"
	case cfg.GroupTimeout > 0 && cfg.SendPartialResultOnExpiry:
		outcome = "GroupTimeout releases the group as a partial result"
	case cfg.GroupTimeout > 0:
		outcome = "GroupTimeout discards the group"
	}
	return &Aggregator{
		core:               grouphandler.New(kind, cfg.settings()),
		strategy:           cfg.Release,
		output:             cfg.Output,
		partialOnExpiry:    cfg.SendPartialResultOnExpiry,
		removeOnCompletion: cfg.ExpireGroupsOnCompletion,
		popSequence:        !cfg.DisablePopSequence,
		sendAfterUnlock:    cfg.ReleaseLockBeforeSend,
		timeoutFunc:        cfg.GroupTimeoutFunc != nil,
		sendRetry:          2*cmp.Or(cfg.LockTimeout, DefaultLockTimeout) + cmp.Or(cfg.PollInterval, DefaultPollInterval),
		noSizeOutcome:      outcome,
	}, nil
}

// AddHandler adds the aggregator to r as a consumer handler named
// handlerName on subscribeTopic, and ties the timeout runner to it: the
// runner starts when the handler subscribes and stops, and is waited for,
// when the handler's subscription ends (router closed, handler stopped) or
// when the subscriber is closed. Without a Config.Logger the aggregator
// logs to r's logger. It panics, as r.AddConsumerHandler does, on a
// duplicate handler name. Add an aggregator to one router only.
func (a *Aggregator) AddHandler(r *message.Router, handlerName, subscribeTopic string, sub message.Subscriber) *message.Handler {
	return a.core.AddHandler(r, handlerName, subscribeTopic, sub, a.Handle, a.RunTimeouts)
}

// Handle is the aggregator's [message.NoPublishHandlerFunc]: it adds msg to
// its group under the group lock and, when the release strategy says so,
// publishes the group's output and completes the group, before returning.
// A nil error means msg is durably in the store (or recognised as a
// redelivery, or discarded as late) and may be acked. An error means msg
// must be redelivered: a lock timeout (ErrLockTimeout) or lost lock
// (ErrLockLost), a store or publish failure, ErrNoCorrelationKey or
// ErrNoMessageID.
//
// It costs one lock acquisition and release, one store Add, and on release
// one Get, one Publish and one Update (or Remove). ReleaseWhen reads the
// group (one Get) for every message, and its release reads it no more.
// Where the store locks groups itself (Config.Locks nil and a
// groupstore.Locker Store, such as sqlstore's), there is no lease: a
// message that does not release its group costs its Add alone (one
// statement on PostgreSQL), and a release runs in one transaction of the
// store under the group row's lock.
// Under ReleaseOnSequenceSize, misfits found at release cost a discard
// Publish and an Update, and no second Get.
func (a *Aggregator) Handle(msg *message.Message) (err error) {
	ctx, end := a.core.Begin(msg)
	defer func() { end(err) }()
	key, id, err := a.core.Identify(msg)
	if err != nil {
		return err
	}
	need := func(added grouphandler.Added) bool {
		if added.Complete { // a release whose send did not finish (ReleaseLockBeforeSend)
			return true
		}
		a.checkSequenceSize(key, added.ID, msg)
		return a.timeoutFunc || a.strategy.needsMessages() || a.strategy.canRelease(added.Size, msg, nil)
	}
	return a.core.AddThen(ctx, key, id, msg, nil, need, func(lctx context.Context, added grouphandler.Added) error {
		return a.handle(lctx, key, msg, added)
	})
}

// handle is Handle's work under the group lock, on its lock context, once
// msg is in the group and the group may be released (for ReleaseWhen,
// after every message): it reads the group, with its messages, once, and
// releases it if the strategy says so. A group read complete was released
// by another message's handling since msg's Add, where the Add was not
// under the lock (see grouphandler.Core.AddThen), and a group gone, or
// another incarnation, was released (and msg with it) and removed.
func (a *Aggregator) handle(ctx context.Context, key string, msg *message.Message, added grouphandler.Added) error {
	sg, gone, err := a.core.Reread(ctx, key, added)
	switch {
	case err != nil || gone:
		return err
	case sg.Complete && len(sg.Messages) > 0: // a release whose send did not finish (ReleaseLockBeforeSend)
		return a.release(ctx, sg, toGroup(sg, false))
	case sg.Complete:
		return nil
	}
	var view *Group
	if a.strategy.needsMessages() {
		view = toGroup(sg, false)
	}
	if !a.strategy.canRelease(sg.Size, msg, view) {
		return a.schedule(ctx, sg, msg)
	}
	fit, err := a.dropMisfits(ctx, sg)
	if err != nil {
		return err
	}
	if fit.Version != sg.Version && !a.strategy.canRelease(fit.Size, nil, toGroup(fit, false)) {
		return a.schedule(ctx, fit, msg)
	}
	return a.release(ctx, fit, toGroup(fit, false))
}

// schedule applies Config.GroupTimeoutFunc, if any, to g, the group as
// the message latest left it unreleased: it moves or clears the group's
// due time, or expires the group now.
func (a *Aggregator) schedule(ctx context.Context, g groupstore.Group, latest *message.Message) error {
	s := a.core.ScheduleFor(g, latest)
	switch {
	case !s.Set:
		return nil
	case s.Now:
		sg, err := a.core.Get(ctx, g.Key)
		if err != nil {
			return err
		}
		return a.expire(ctx, sg)
	}
	return a.core.Reschedule(ctx, g, s)
}

// reportLimit bounds the groups an aggregator remembers having reported.
const reportLimit = 4096

// reportedGroups remembers groups by key and ID (incarnation) so that
// each is reported once per process. Past reportLimit groups it forgets them all,
// which bounds its memory; a group still open then may be reported again.
type reportedGroups struct {
	mu  sync.Mutex
	ids map[string]struct{}
}

// first reports whether id is new, and remembers it.
func (r *reportedGroups) first(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.ids[id]; ok {
		return false
	}
	if r.ids == nil || len(r.ids) >= reportLimit {
		r.ids = make(map[string]struct{})
	}
	r.ids[id] = struct{}{}
	return true
}

// checkSequenceSize reports, with ReleaseOnSequenceSize, a message of group
// key (incarnation groupID) without a valid SequenceSizeKey: the strategy
// never releases a group on it, and a group whose first message lacks it
// waits for its timeout, or forever without one. It logs at error level,
// Watermill's LoggerAdapter having no warning level, once per group and
// process, not per message.
func (a *Aggregator) checkSequenceSize(key, groupID string, msg *message.Message) {
	if a.strategy.kind != releaseSequence {
		return
	}
	v := msg.Metadata.Get(SequenceSizeKey)
	if n, err := strconv.Atoi(v); err == nil && n > 0 {
		return
	}
	if !a.reported.first(key + "\x00" + groupID) {
		return
	}
	a.core.Logger().Error("Message without a sequence size: ReleaseOnSequenceSize (the default Release) does not release its group on it; "+
		"for messages without sequence metadata set Config.Release to ReleaseOnCount, or ReleaseOnTimeout with a GroupTimeout",
		fmt.Errorf("%w: %s %q", ErrNoSequenceSize, SequenceSizeKey, v),
		watermill.LogFields{"group": key, "message_uuid": msg.UUID, "outcome": a.noSizeOutcome})
}

// Discard reasons of messages that do not fit their group's sequence.
const (
	reasonDuplicateSequence = "duplicate sequence number"
	reasonSizeMismatch      = "sequence size mismatch"
)

// dropMisfits discards, with ReleaseOnSequenceSize, the messages of sg
// that do not fit its sequence, as Spring Integration's sequence-aware
// groups refuse them: a message whose SequenceNumberKey an earlier message
// of the group has, or whose SequenceSizeKey differs from the first
// message's. It takes them out of the group and returns the group as it
// is then, or sg if all fit. Checking at release time, when the group is
// read anyway, costs nothing per message; a misfit only waits in the group
// until then.
func (a *Aggregator) dropMisfits(ctx context.Context, sg groupstore.Group) (groupstore.Group, error) {
	if a.strategy.kind != releaseSequence || len(sg.Messages) == 0 {
		return sg, nil
	}
	size := sg.Messages[0].Metadata[SequenceSizeKey]
	seen := make(map[string]bool, len(sg.Messages))
	var misfits []*message.Message
	for _, m := range sg.Messages {
		reason := ""
		n, numbered := m.Metadata[SequenceNumberKey]
		switch {
		case m.Metadata[SequenceSizeKey] != size:
			reason = reasonSizeMismatch
		case numbered && seen[n]:
			reason = reasonDuplicateSequence
		}
		if reason == "" {
			if numbered {
				seen[n] = true
			}
			continue
		}
		misfits = append(misfits, grouphandler.WithReason(grouphandler.ToMessage(m.UUID, m), DiscardReasonKey, reason))
	}
	if len(misfits) == 0 {
		return sg, nil
	}
	return a.core.Drop(ctx, sg, misfits)
}

// toGroup converts a stored group to the view of strategies and outputs.
func toGroup(sg groupstore.Group, expired bool) *Group {
	g := &Group{Key: sg.Key, Expired: expired, Messages: make([]*message.Message, len(sg.Messages))}
	for i, m := range sg.Messages {
		g.Messages[i] = grouphandler.ToMessage(m.UUID, m)
	}
	return g
}

// release publishes the output of g (the view of sg) and completes sg.
func (a *Aggregator) release(ctx context.Context, sg groupstore.Group, g *Group) error {
	out, err := a.output(*g)
	if err != nil {
		return fmt.Errorf("aggregator: output of group %q: %w", sg.Key, err)
	}
	if out == nil {
		return fmt.Errorf("aggregator: output of group %q: the output function returned nil", sg.Key)
	}
	if a.popSequence && len(g.Messages) > 0 {
		// As Spring's compareSequences: only an output that still carries
		// the group's stack is popped, not one Output has popped or
		// rebuilt.
		if d, ok := out.Metadata[sequence.DetailsKey]; ok && d == g.Messages[0].Metadata.Get(sequence.DetailsKey) {
			if err := sequence.Pop(out.Metadata); err != nil {
				return fmt.Errorf("aggregator: output of group %q: %w", sg.Key, err)
			}
		}
	}
	out.UUID = a.core.OutputUUID(sg.ID, sg.Releases+1)
	return a.complete(ctx, sg, out)
}

// complete publishes outs, if any, and marks sg released and complete, or
// removes it. With ReleaseLockBeforeSend and outs it closes sg and leaves
// the rest until the group lock is released (see closeThenSend).
func (a *Aggregator) complete(ctx context.Context, sg groupstore.Group, outs ...*message.Message) error {
	if a.sendAfterUnlock && len(outs) > 0 {
		return a.closeThenSend(ctx, sg, outs)
	}
	return a.core.Commit(ctx, sg, a.core.Completion(sg), a.removeOnCompletion, outs)
}

// closeThenSend is a release under ReleaseLockBeforeSend. Under the lock
// it closes sg (marks it complete, keeping its messages; see
// grouphandler.Core.Close), unless it is closed already; once the lock is
// released it publishes outs and records the release, conditional on the
// closed group's version, or with an Outbox does both in one transaction.
// A conflict or a missing group then means that another finisher (the
// redelivery, or a runner) recorded the release first: not an error.
func (a *Aggregator) closeThenSend(ctx context.Context, sg groupstore.Group, outs []*message.Message) error {
	if !sg.Complete {
		var err error
		if sg, err = a.core.Close(ctx, sg, a.sendRetry); err != nil {
			return err
		}
	}
	grouphandler.AfterUnlock(ctx, func(ctx context.Context) error {
		err := a.core.Commit(ctx, sg, a.core.Completion(sg), false, outs)
		if errors.Is(err, groupstore.ErrConflict) || errors.Is(err, groupstore.ErrNotFound) {
			return nil
		}
		return err
	})
	return nil
}

// discard sends msgs of group key to the discard topic, or logs them.
func (a *Aggregator) discard(ctx context.Context, key, reason string, msgs ...*message.Message) error {
	out := make([]*message.Message, len(msgs))
	for i, m := range msgs {
		out[i] = grouphandler.WithReason(m.Copy(), DiscardReasonKey, reason)
	}
	return a.core.Discard(ctx, key, out)
}

// RunTimeouts expires due groups until ctx is done, then returns nil. Every
// PollInterval it claims due groups from the store and, for each, takes the
// group lock (waiting up to LockTimeout, but at most a second or
// PollInterval if that is longer; a busy group is left until its claim
// lapses), checks that the group
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
	return a.core.RunTimeouts(ctx, a.expire)
}

// expire handles one due group under its lock.
func (a *Aggregator) expire(ctx context.Context, sg groupstore.Group) error {
	if sg.Complete && sg.Size > 0 { // a release whose send did not finish
		return a.release(ctx, sg, toGroup(sg, false))
	}
	if sg.Complete || sg.Size == 0 {
		return a.core.Remove(ctx, sg)
	}
	sg, err := a.dropMisfits(ctx, sg)
	if err != nil {
		return err
	}
	g := toGroup(sg, true)
	switch {
	case a.strategy.canRelease(sg.Size, nil, g):
		if a.strategy.kind == releaseTimeout {
			g.Expired = false
		}
		return a.release(ctx, sg, g)
	case a.partialOnExpiry:
		return a.release(ctx, sg, g)
	}
	if err := a.discard(ctx, sg.Key, "expired", g.Messages...); err != nil {
		return err
	}
	return a.complete(ctx, sg)
}

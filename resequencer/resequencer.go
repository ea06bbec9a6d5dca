package resequencer

import (
	"context"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/lockreg/lockreg/groupstore"
	"github.com/lockreg/lockreg/internal/grouphandler"
)

// Resequencer releases the messages of each group in sequence order. Make
// one with [New]; it is safe for concurrent use by the router's handler
// goroutines and the timeout runner.
//
// A released message keeps its payload and metadata; its UUID is replaced
// by a name-based (SHA-1) UUID of the group's incarnation
// (groupstore.Group.ID) and its sequence number, so every attempt to
// publish it, by any instance, carries the same UUID.
type Resequencer struct {
	// core holds the settings the resequencer shares with the aggregator,
	// defaulted, and does the work that does not depend on sequences.
	core *grouphandler.Core
	// rules holds the resequencer's own settings.
	rules rules
}

// New returns a resequencer configured by cfg after applying defaults. It
// does no I/O. It returns an error wrapping ErrInvalidConfig for an invalid
// configuration.
func New(cfg Config) (*Resequencer, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Resequencer{core: grouphandler.New(kind, cfg.settings()), rules: cfg.rules()}, nil
}

// AddHandler adds the resequencer to r as a consumer handler named
// handlerName on subscribeTopic, and ties the timeout runner to it: the
// runner starts when the handler subscribes and stops, and is waited for,
// when the handler's subscription ends or the subscriber is closed.
// Without a Config.Logger the resequencer logs to r's logger. It panics, as
// r.AddConsumerHandler does, on a duplicate handler name. Add a
// resequencer to one router only.
func (q *Resequencer) AddHandler(r *message.Router, handlerName, subscribeTopic string, sub message.Subscriber) *message.Handler {
	return q.core.AddHandler(r, handlerName, subscribeTopic, sub, q.Handle, q.RunTimeouts)
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
// With a registry (Config.Locks) it costs one lock acquisition and
// release, one store Add and one Get (which reads the group's unreleased
// messages); a release or discard adds a Publish and an Update (or
// Remove). Where the store locks groups itself (Config.Locks nil and a
// groupstore.Locker Store, such as sqlstore's) there is no lease: on
// PostgreSQL, whose Add probes the group (groupstore.Prober), a message
// that cannot release anything costs its Add alone, one statement that
// also finds a duplicate number or a differing size; a message that may
// release a run (its number follows the last released one with
// ReleasePartialSequences; without it, the group may hold the whole
// sequence), one that does not fit, a late one, a redelivery, and every
// message with a GroupTimeoutFunc add one transaction of the store under
// the group row's lock (BEGIN, a Get that locks, the release, COMMIT). Where the
// store locks groups but does not probe (sqlstore on MySQL and SQLite),
// every message runs in one such transaction, its Add and Get in it.
func (q *Resequencer) Handle(msg *message.Message) (err error) {
	ctx, end := q.core.Begin(msg)
	defer func() { end(err) }()
	key, id, err := q.core.Identify(msg)
	if err != nil {
		return err
	}
	seq, size, problem := q.rules.sequence(msg.Metadata)
	if problem != "" {
		return q.core.Discard(ctx, key, []*message.Message{withReason(msg.Copy(), reasonInvalid+problem)})
	}
	probe := &groupstore.Probe{UniqueKey: q.rules.numberKey, Unique: seq, SameKey: q.rules.sizeKey, Same: size}
	need := func(added grouphandler.Added) bool { return q.rules.needsLook(added, seq, size) }
	return q.core.AddThen(ctx, key, id, msg, probe, need, func(lctx context.Context, added grouphandler.Added) error {
		sg, gone, err := q.core.Reread(lctx, key, added)
		if err != nil || gone {
			return err
		}
		p := q.rules.planFor(sg, false)
		var s grouphandler.Schedule
		if !p.complete {
			s = q.core.ScheduleFor(p.after(sg), msg)
		}
		if s.Now {
			return q.apply(lctx, sg, q.rules.planFor(sg, true), true, grouphandler.Schedule{})
		}
		return q.apply(lctx, sg, p, false, s)
	})
}

// needsLook reports whether the message numbered seq of a sequence of
// size (0 for none), added as added tells, needs its group read under the
// lock: unless the store found that it fits the group (no other unreleased
// message has its number, all have its size), it may be a duplicate or a
// misfit, which is discarded at once; a late one too; a redelivery may
// follow an attempt that stopped before its release; and it may let a run
// be released. Otherwise nothing in the group can change for it: its
// number does not follow the last released one (with partial releases),
// or the group holds fewer messages than the rest of the sequence.
// Every message that completes a run has its Add come after those of the
// run's other messages (Adds of a group take turns on its row), or after
// the release that its run follows, so it sees the run whole.
func (r rules) needsLook(added grouphandler.Added, seq, size int64) bool {
	last := added.LastReleasedSequence
	switch {
	case !added.Fits, added.Outcome != groupstore.Added, added.Complete, r.timeoutFunc, seq <= last:
		return true
	case r.partial:
		return seq == last+1
	}
	return size > 0 && int64(added.Size) >= size-last
}

// withReason sets the discard reason of m and returns m.
func withReason(m *message.Message, reason string) *message.Message {
	return grouphandler.WithReason(m, DiscardReasonKey, reason)
}

// apply carries out p for sg under the group lock: it publishes the
// release, discards, and then records the outcome in the store, with the
// due time s asks for (Config.GroupTimeoutFunc), so that a failure
// anywhere leaves the group as it was for the next attempt.
func (q *Resequencer) apply(ctx context.Context, sg groupstore.Group, p plan, expired bool, s grouphandler.Schedule) error {
	var outs []*message.Message
	for _, e := range p.release {
		outs = append(outs, grouphandler.ToMessage(q.core.OutputUUID(sg.ID, e.seq), e.msg))
	}
	if len(p.discard) > 0 {
		ds := make([]*message.Message, len(p.discard))
		for i, d := range p.discard {
			ds[i] = withReason(grouphandler.ToMessage(d.msg.UUID, d.msg), d.reason)
		}
		if err := q.core.Discard(ctx, sg.Key, ds); err != nil {
			return err
		}
	}
	var (
		u      groupstore.Update
		remove bool
	)
	switch {
	case expired && q.rules.removeOnTimeout, p.complete && q.rules.removeOnCompletion:
		remove = true
	case expired || p.complete:
		u = q.core.Completion(sg)
		u.SetLastReleasedSequence, u.LastReleasedSequence = true, p.last
	case p.changes():
		u = groupstore.Update{IfVersion: sg.Version, Release: p.ids(),
			SetLastReleasedSequence: true, LastReleasedSequence: p.last}
		if s.Set {
			u.Timeout, u.ClearTimeout = s.Update.Timeout, s.Update.ClearTimeout
		}
	case s.Set:
		return q.core.Reschedule(ctx, sg, s)
	default:
		return nil
	}
	return q.core.Commit(ctx, sg, u, remove, outs)
}

// RunTimeouts expires due groups until ctx is done, then returns nil. Every
// PollInterval it claims due groups from the store and, for each, takes the
// group lock (waiting up to LockTimeout, but at most a second or
// PollInterval if that is longer; a busy group is left until its claim
// lapses), checks that the group
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
	return q.core.RunTimeouts(ctx, q.expire)
}

// expire handles one due group under its lock.
func (q *Resequencer) expire(ctx context.Context, sg groupstore.Group) error {
	if sg.Complete {
		return q.core.Remove(ctx, sg)
	}
	return q.apply(ctx, sg, q.rules.planFor(sg, true), true, grouphandler.Schedule{})
}

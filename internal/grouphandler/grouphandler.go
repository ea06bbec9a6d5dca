// Package grouphandler is the machinery shared by the aggregator and the
// resequencer: Watermill handlers that keep message groups in a
// groupstore.Store, change each group only under its lock in a
// registry.LockRegistry, and expire due groups with a timeout runner tied
// to the handler's subscription.
//
// A [Core] does the work that does not depend on what a handler makes of a
// group: defaults and checks of the shared settings, group locks with a
// bounded wait, adding messages, discards, output UUIDs and the timeout
// runner. Errors and log fields name the handler's package, and errors wrap
// that package's sentinels, so the split is invisible to callers.
package grouphandler

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

// Kind describes the handler a [Core] works for.
type Kind struct {
	// Name is the handler's package name. It prefixes errors, keys the
	// handler name in logs and seeds the output UUID namespace.
	Name string
	// The defaults of Config.LockPrefix, Config.LockTimeout and
	// Config.PollInterval, and the metadata key the default
	// Config.Correlation reads.
	DefaultLockPrefix   string
	DefaultLockTimeout  time.Duration
	DefaultPollInterval time.Duration
	CorrelationIDKey    string
	// DiscardReasonKey is the metadata key of a discarded message's reason.
	DiscardReasonKey string

	// The package's sentinel errors. ErrLockLost is nil for a handler that
	// does not watch its lock holds.
	ErrNoCorrelationKey error
	ErrNoMessageID      error
	ErrLockTimeout      error
	ErrLockLost         error
}

// Core is the shared part of one handler. Make one with [New]; it is safe
// for concurrent use once the handler runs.
type Core struct {
	Config
	kind      Kind
	loggerSet bool
	namespace uuid.UUID

	// defaults is the note on the in-memory defaults New applied, "" if
	// none; noted makes announce log it once.
	defaults string
	noted    sync.Once
}

// New returns the core of a handler of kind k configured by cfg, after
// applying the defaults. The caller checks cfg first.
func New(k Kind, cfg Config) *Core {
	loggerSet := cfg.Logger != nil
	defaults := defaultsNote(k.Name, cfg.Store == nil, cfg.Locks == nil)
	cfg.setDefaults(k)
	if !loggerSet {
		cfg.Logger = watermill.NewSlogLogger(nil)
	}
	return &Core{
		Config:    cfg,
		kind:      k,
		loggerSet: loggerSet,
		defaults:  defaults,
		// The namespace differs per kind so that an aggregator and a
		// resequencer never give two different outputs one UUID.
		namespace: uuid.NewSHA1(uuid.NameSpaceURL, []byte("https://github.com/lockreg/lockreg/"+k.Name)),
	}
}

// AddHandler adds handle to r as a consumer handler named handlerName on
// subscribeTopic, and runs runTimeouts for as long as the handler's
// subscription lives. Without a Config.Logger the core adopts r's logger.
func (c *Core) AddHandler(r *message.Router, handlerName, subscribeTopic string, sub message.Subscriber,
	handle message.NoPublishHandlerFunc, runTimeouts func(context.Context) error) *message.Handler {
	if !c.loggerSet {
		c.Logger = r.Logger()
	}
	c.Logger = c.Logger.With(watermill.LogFields{c.kind.Name: handlerName})
	c.announce()
	return r.AddConsumerHandler(handlerName, subscribeTopic, &runnerSubscriber{Subscriber: sub, run: runTimeouts}, handle)
}

// defaultsNote is the note logged when a handler of kind name starts
// without a Store (noStore) or Locks (noLocks), or "" if it has both.
func defaultsNote(name string, noStore, noLocks bool) string {
	switch {
	case noStore && noLocks:
		return "No Config.Store or Config.Locks: the " + name + " keeps its groups in memory and locks them in this process; it is single-instance and loses its groups on restart"
	case noStore:
		return "No Config.Store: the " + name + " keeps its groups in this process's memory; they are not shared with other instances and are lost on restart"
	case noLocks:
		return "No Config.Locks: the " + name + " locks groups in this process only; instances sharing its Store do not take turns on a group"
	}
	return ""
}

// announce logs, at info level and once per handler, that it runs on
// in-memory defaults. It is called where the handler starts: AddHandler,
// after adopting the router's logger, or else the first Identify (Handle)
// or RunTimeouts.
func (c *Core) announce() {
	c.noted.Do(func() {
		if c.defaults != "" {
			c.Logger.Info(c.defaults, nil)
		}
	})
}

// Identify returns the correlation key and the id of msg, or an error
// wrapping ErrNoCorrelationKey or ErrNoMessageID.
func (c *Core) Identify(msg *message.Message) (key, id string, err error) {
	c.announce()
	key = c.Correlation(msg)
	if key == "" {
		return "", "", fmt.Errorf("%w: message %s", c.kind.ErrNoCorrelationKey, msg.UUID)
	}
	id = c.MessageID(msg)
	if id == "" {
		return "", "", fmt.Errorf("%w: message %s", c.kind.ErrNoMessageID, msg.UUID)
	}
	return key, id, nil
}

// Lock takes the group lock of key, waiting at most wait, or returns an
// error wrapping ErrLockTimeout. It returns the context to work on the
// group with and the function that releases the lock. With ErrLockLost
// set, that context ends, with cause ErrLockLost, when the hold ends or may
// have ended; otherwise it is ctx.
func (c *Core) Lock(ctx context.Context, key string, wait time.Duration) (context.Context, func(), error) {
	l := c.Locks.Obtain(c.LockPrefix + key)
	wctx, cancel := context.WithTimeout(ctx, wait)
	ok, err := l.TryLockContext(wctx)
	cancel()
	if err != nil {
		return nil, nil, fmt.Errorf("%s: locking group %q: %w", c.kind.Name, key, err)
	}
	if !ok {
		return nil, nil, fmt.Errorf("%w: group %q after %v", c.kind.ErrLockTimeout, key, wait)
	}
	unlock := func() {
		// The message context ends with its ack; the unlock must outlive it.
		if err := l.UnlockContext(context.WithoutCancel(ctx)); err != nil {
			c.Logger.Error("Unlocking group failed; another instance may have changed it", err,
				watermill.LogFields{"group": key})
		}
	}
	if c.kind.ErrLockLost == nil {
		return ctx, unlock, nil
	}
	held, lost := context.WithCancelCause(ctx)
	done, stop := l.Done(), make(chan struct{})
	watching := make(chan struct{})
	go func() {
		defer close(watching)
		select {
		case <-done:
			lost(c.kind.ErrLockLost)
		case <-stop:
		}
	}()
	return held, func() {
		close(stop)
		<-watching
		lost(nil)
		unlock()
	}, nil
}

// Fail marks err as caused by a lost lock when the lock context lctx says
// so, so that the caller sees why nothing more was done.
func (c *Core) Fail(lctx context.Context, err error) error {
	lostErr := c.kind.ErrLockLost
	if err != nil && lostErr != nil && errors.Is(context.Cause(lctx), lostErr) && !errors.Is(err, lostErr) {
		return fmt.Errorf("%w: %w", lostErr, err)
	}
	return err
}

// Held returns the cause of the end of lctx for a handler that watches its
// lock holds, so that it publishes nothing once the hold may be gone.
func (c *Core) Held(lctx context.Context) error {
	if c.kind.ErrLockLost == nil {
		return nil
	}
	return context.Cause(lctx)
}

// Add adds msg, identified by id, to group key under the group lock. It
// reports whether the group is to be looked at: a message that reached a
// complete group is discarded as "late", and a redelivery to a complete
// group needs nothing more. A redelivery to an open group is looked at
// again, as an earlier attempt may have failed between adding and
// releasing.
func (c *Core) Add(ctx context.Context, key, id string, msg *message.Message) (groupstore.Group, bool, error) {
	g, outcome, err := c.Store.Add(ctx, key, groupstore.Message{UUID: id, Metadata: msg.Metadata, Payload: msg.Payload}, c.GroupTimeout)
	if err != nil {
		return g, false, fmt.Errorf("%s: adding message %s to group %q: %w", c.kind.Name, msg.UUID, key, err)
	}
	switch outcome {
	case groupstore.Rejected:
		return g, false, c.Discard(ctx, key, []*message.Message{WithReason(msg.Copy(), c.kind.DiscardReasonKey, "late")})
	case groupstore.Duplicate:
		c.Logger.Debug("Redelivered message ignored", watermill.LogFields{"message_uuid": msg.UUID, "group": key})
		if g.Complete {
			return g, false, nil
		}
	}
	return g, true, nil
}

// Get reads group key.
func (c *Core) Get(ctx context.Context, key string) (groupstore.Group, error) {
	sg, err := c.Store.Get(ctx, key)
	if err != nil {
		return sg, fmt.Errorf("%s: reading group %q: %w", c.kind.Name, key, err)
	}
	return sg, nil
}

// Completion is the update that completes sg: its messages are released
// and, with MinimumTimeoutForEmptyGroups, the kept group falls due for
// removal then.
func (c *Core) Completion(sg groupstore.Group) groupstore.Update {
	u := groupstore.Update{IfVersion: sg.Version, ReleaseAll: true, Complete: true, ClearTimeout: true}
	if c.MinimumTimeoutForEmptyGroups > 0 {
		u.ClearTimeout, u.Timeout = false, c.MinimumTimeoutForEmptyGroups
	}
	return u
}

// Commit publishes outs to the output topic and records u for sg, or
// removes sg when remove is set. With an Outbox store both happen in one
// transaction (a removal becomes a completion that falls due at once,
// followed by a removal, so that a failed removal is left to the timeout
// runner). Otherwise outs are published first, so that a failure before the
// record publishes them again, with the same UUIDs, on the next attempt. A
// lost hold (Held) stops it before it publishes.
func (c *Core) Commit(ctx context.Context, sg groupstore.Group, u groupstore.Update, remove bool, outs []*message.Message) error {
	for _, m := range outs {
		m.SetContext(ctx)
	}
	if err := c.Held(ctx); err != nil {
		return fmt.Errorf("%s: before releasing group %q: %w", c.kind.Name, sg.Key, err)
	}
	if ob, ok := c.Store.(groupstore.Outbox); ok && len(outs) > 0 {
		if remove {
			u = groupstore.Update{IfVersion: sg.Version, ReleaseAll: true, Complete: true, Timeout: time.Microsecond}
		}
		if err := ob.UpdatePublish(ctx, sg.Key, u, c.OutputTopic, outs...); err != nil {
			return fmt.Errorf("%s: releasing %d message(s) of group %q: %w", c.kind.Name, len(outs), sg.Key, err)
		}
		if remove {
			if err := c.Remove(ctx, groupstore.Group{Key: sg.Key, Version: sg.Version + 1}); err != nil {
				c.Logger.Error("Removing a released group failed; the timeout runner will", err,
					watermill.LogFields{"group": sg.Key})
			}
		}
		return nil
	}
	if len(outs) > 0 {
		if err := c.Publisher.Publish(c.OutputTopic, outs...); err != nil {
			return fmt.Errorf("%s: publishing %d message(s) of group %q: %w", c.kind.Name, len(outs), sg.Key, err)
		}
	}
	var err error
	if remove {
		err = c.Store.Remove(ctx, sg.Key, sg.Version)
	} else {
		err = c.Store.Update(ctx, sg.Key, u)
	}
	if err != nil {
		return fmt.Errorf("%s: recording the release of group %q: %w", c.kind.Name, sg.Key, err)
	}
	return nil
}

// Remove removes sg, a kept complete group that fell due; one already gone
// is no error.
func (c *Core) Remove(ctx context.Context, sg groupstore.Group) error {
	err := c.Store.Remove(ctx, sg.Key, sg.Version)
	if err != nil && !errors.Is(err, groupstore.ErrNotFound) {
		return fmt.Errorf("%s: removing group %q: %w", c.kind.Name, sg.Key, err)
	}
	return nil
}

// WithReason sets the discard reason of m under key and returns m.
func WithReason(m *message.Message, key, reason string) *message.Message {
	m.Metadata.Set(key, reason)
	return m
}

// Discard sends msgs of group key, their reasons set, to the discard
// topic, or logs them without one.
func (c *Core) Discard(ctx context.Context, key string, msgs []*message.Message) error {
	if c.DiscardPublisher == nil {
		for _, m := range msgs {
			c.Logger.Info("Message discarded", watermill.LogFields{"message_uuid": m.UUID, "group": key,
				"reason": m.Metadata.Get(c.kind.DiscardReasonKey), "payload": string(m.Payload)})
		}
		return nil
	}
	for _, m := range msgs {
		m.SetContext(ctx)
	}
	if err := c.Held(ctx); err != nil {
		return fmt.Errorf("%s: before discarding from group %q: %w", c.kind.Name, key, err)
	}
	if err := c.DiscardPublisher.Publish(c.DiscardTopic, msgs...); err != nil {
		return fmt.Errorf("%s: discarding %d message(s) of group %q: %w", c.kind.Name, len(msgs), key, err)
	}
	return nil
}

// OutputUUID is the UUID of output seq of the group incarnation groupID
// (groupstore.Group.ID). It is name-based, so that every attempt to
// publish one output, by any instance, carries the same UUID.
func (c *Core) OutputUUID(groupID string, seq int64) string {
	return uuid.NewSHA1(c.namespace, []byte(groupID+"/"+strconv.FormatInt(seq, 10))).String()
}

// ToMessage makes a Watermill message with UUID id of a stored one.
func ToMessage(id string, m groupstore.Message) *message.Message {
	wm := message.NewMessage(id, m.Payload)
	for k, v := range m.Metadata {
		wm.Metadata.Set(k, v)
	}
	return wm
}

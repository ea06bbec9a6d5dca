package grouphandler

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/lockreg/lockreg/groupstore"
)

// Added is what the Add of a message told of its group.
type Added struct {
	// Group is the group as the Add left it, without its messages.
	groupstore.Group
	// Outcome is what the Add did with the message.
	Outcome groupstore.Outcome
	// Fits reports that the store probed the group in the Add and found
	// that the message fits it (see groupstore.Prober); false without a
	// probe, without a probing store, or when it does not fit.
	Fits bool
}

// Add adds msg, identified by id, to group key; call it under the group
// lock. It returns the group as Add left it, without its messages, and
// whether the handler is to look at the group: a message that reached a
// complete group is discarded as "late", and a redelivery to a complete
// group needs nothing more. A redelivery to an open group is looked at
// again, as an earlier attempt may have failed between adding and
// releasing, and so is one to a complete group that still holds
// messages, whose release's send did not finish.
func (c *Core) Add(ctx context.Context, key, id string, msg *message.Message) (g groupstore.Group, look bool, err error) {
	a, look, err := c.add(ctx, key, id, msg, nil)
	return a.Group, look, err
}

// add is Add; with probe it probes the group with the Core's prober, which
// must be set.
func (c *Core) add(ctx context.Context, key, id string, msg *message.Message, probe *groupstore.Probe) (a Added, look bool, err error) {
	if err := c.checkHold(ctx, "adding to", key); err != nil {
		return a, false, err
	}
	m := groupstore.Message{UUID: id, Metadata: msg.Metadata, Payload: msg.Payload}
	if probe != nil {
		a.Group, a.Outcome, a.Fits, err = c.prober.AddProbe(ctx, key, m, c.s.GroupTimeout, *probe)
	} else {
		a.Group, a.Outcome, err = c.store(ctx).Add(ctx, key, m, c.s.GroupTimeout)
	}
	if err != nil {
		return a, false, fmt.Errorf("%s: adding message %s to group %q: %w", c.kind.Name, msg.UUID, key, err)
	}
	c.tel.addedMessage(a.Outcome)
	switch a.Outcome {
	case groupstore.Rejected:
		return a, false, c.Discard(ctx, key, []*message.Message{WithReason(msg.Copy(), c.kind.DiscardReasonKey, "late")})
	case groupstore.Duplicate:
		c.logger.Debug("Redelivered message ignored", watermill.LogFields{"message_uuid": msg.UUID, "group": key})
		if a.Complete && a.Size == 0 {
			return a, false, nil
		}
		// A complete group that still holds messages is a release whose
		// send did not finish (aggregator.Config.ReleaseLockBeforeSend):
		// the handler finishes it.
	}
	return a, true, nil
}

// AddThen adds msg, identified by id, to group key as Add does and, if
// the handler is to look at the group and need(added) says the group may
// have to change, calls then under the group lock with what the Add told.
// With a registry (Settings.Locks) the Add runs under the same hold as
// then. Where the store locks groups itself (a groupstore.Locker and no
// Locks), the Add is a call of its own and then runs in a Locked call only
// if need says so: a message that cannot complete its group costs its Add
// alone, one statement on PostgreSQL. With probe the handler needs the
// store to probe the group in that Add (see groupstore.Prober): where the
// store cannot (MySQL, SQLite), the Add runs in the Locked call, before
// need and then, as with a registry, and need sees no fit. then must read
// the group again before it decides, with Reread, as another Add may have
// come in between, and a release or a removal.
func (c *Core) AddThen(ctx context.Context, key, id string, msg *message.Message, probe *groupstore.Probe,
	need func(added Added) bool, then func(ctx context.Context, added Added) error) error {
	if c.locker == nil || probe != nil && c.prober == nil {
		return c.WithLock(ctx, key, func(lctx context.Context) error {
			added, look, err := c.add(lctx, key, id, msg, nil)
			if err != nil || !look || !need(added) {
				return err
			}
			return then(lctx, added)
		})
	}
	groupSpan(ctx, key)
	added, look, err := c.add(ctx, key, id, msg, probe)
	if err != nil || !look || !need(added) {
		return err
	}
	return c.WithLock(ctx, key, func(lctx context.Context) error { return then(lctx, added) })
}

// Reread reads group key in AddThen's then, and reports gone when the
// group that added holds (that incarnation) no longer exists: another
// handling released and removed it, or expired it, after the Add, and
// dealt with the message then. The message is done; it must not be
// handled again, which would add it to a new group.
func (c *Core) Reread(ctx context.Context, key string, added Added) (sg groupstore.Group, gone bool, err error) {
	sg, err = c.store(ctx).Get(ctx, key)
	switch {
	case errors.Is(err, groupstore.ErrNotFound):
		return sg, true, nil
	case err != nil:
		return sg, false, fmt.Errorf("%s: reading group %q: %w", c.kind.Name, key, err)
	case sg.ID != added.ID:
		return sg, true, nil
	}
	return sg, false, nil
}

// Get reads group key.
func (c *Core) Get(ctx context.Context, key string) (groupstore.Group, error) {
	sg, err := c.store(ctx).Get(ctx, key)
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
	if c.s.MinimumTimeoutForEmptyGroups > 0 {
		u.ClearTimeout, u.Timeout = false, c.s.MinimumTimeoutForEmptyGroups
	}
	return u
}

// Commit publishes outs to the output topic and records u for sg, or
// removes sg when remove is set. With an Outbox store both happen in one
// transaction (a removal becomes a completion that falls due at once,
// followed by a removal, so that a failed removal is left to the timeout
// runner). Otherwise outs are published first, so that a failure before the
// record publishes them again, with the same UUIDs, on the next attempt. A
// lost hold stops it before it publishes and before it records.
func (c *Core) Commit(ctx context.Context, sg groupstore.Group, u groupstore.Update, remove bool, outs []*message.Message) error {
	for _, m := range outs {
		m.SetContext(ctx)
	}
	if err := c.checkHold(ctx, "releasing", sg.Key); err != nil {
		return err
	}
	if ob, ok := c.store(ctx).(groupstore.Outbox); ok && len(outs) > 0 {
		if remove {
			u = groupstore.Update{IfVersion: sg.Version, ReleaseAll: true, Complete: true, Timeout: time.Microsecond}
		}
		if err := ob.UpdatePublish(ctx, sg.Key, u, c.s.OutputTopic, outs...); err != nil {
			return fmt.Errorf("%s: releasing %d message(s) of group %q: %w", c.kind.Name, len(outs), sg.Key, err)
		}
		if remove {
			if err := c.Remove(ctx, groupstore.Group{Key: sg.Key, Version: sg.Version + 1}); err != nil {
				c.logger.Error("Removing a released group failed; the timeout runner will", err,
					watermill.LogFields{"group": sg.Key})
			}
		}
		c.completed(u, remove, outs)
		return nil
	}
	if len(outs) > 0 {
		if err := c.s.Publisher.Publish(c.s.OutputTopic, outs...); err != nil {
			return fmt.Errorf("%s: publishing %d message(s) of group %q: %w", c.kind.Name, len(outs), sg.Key, err)
		}
	}
	if err := c.checkHold(ctx, "recording the release of", sg.Key); err != nil {
		return err
	}
	var err error
	if remove {
		err = c.store(ctx).Remove(ctx, sg.Key, sg.Version)
	} else {
		err = c.store(ctx).Update(ctx, sg.Key, u)
	}
	if err != nil {
		return fmt.Errorf("%s: recording the release of group %q: %w", c.kind.Name, sg.Key, err)
	}
	c.completed(u, remove, outs)
	return nil
}

// completed counts the group Commit completed, if it did.
func (c *Core) completed(u groupstore.Update, remove bool, outs []*message.Message) {
	if u.Complete || remove {
		c.tel.completedGroup(len(outs) > 0)
	}
}

// checkHold returns an error wrapping holdErr's, saying what was not done
// to group key, if work on ctx must stop. The Core calls it before every
// change of a group and every publish, so that a lost hold changes and
// publishes nothing more, at once.
func (c *Core) checkHold(ctx context.Context, doing, key string) error {
	if err := holdErr(ctx); err != nil {
		return fmt.Errorf("%s: before %s group %q: %w", c.kind.Name, doing, key, err)
	}
	return nil
}

// Remove removes sg, a kept complete group that fell due; one already gone
// is no error.
func (c *Core) Remove(ctx context.Context, sg groupstore.Group) error {
	if err := c.checkHold(ctx, "removing", sg.Key); err != nil {
		return err
	}
	err := c.store(ctx).Remove(ctx, sg.Key, sg.Version)
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
	if c.s.DiscardPublisher == nil {
		for _, m := range msgs {
			c.logger.Info("Message discarded", watermill.LogFields{"message_uuid": m.UUID, "group": key,
				"reason": m.Metadata.Get(c.kind.DiscardReasonKey), "payload": string(m.Payload)})
		}
		c.tel.discardedMessages(msgs, c.kind.DiscardReasonKey)
		return nil
	}
	for _, m := range msgs {
		m.SetContext(ctx)
	}
	if err := c.checkHold(ctx, "discarding from", key); err != nil {
		return err
	}
	if err := c.s.DiscardPublisher.Publish(c.s.DiscardTopic, msgs...); err != nil {
		return fmt.Errorf("%s: discarding %d message(s) of group %q: %w", c.kind.Name, len(msgs), key, err)
	}
	c.tel.discardedMessages(msgs, c.kind.DiscardReasonKey)
	return nil
}

// Drop discards misfits, messages of sg (as Get returned it) with their
// reasons set (see Discard) and their stored UUIDs, and takes them out of
// sg in the store. It returns sg as it is then without reading it again:
// the store applied exactly that change, conditional on sg's version, which
// it incremented by one (see [groupstore.Group.Version]), and counted it as
// a release. Only Updated is left as it was read.
func (c *Core) Drop(ctx context.Context, sg groupstore.Group, misfits []*message.Message) (groupstore.Group, error) {
	if err := c.Discard(ctx, sg.Key, misfits); err != nil {
		return sg, err
	}
	drop := make(map[string]bool, len(misfits))
	ids := make([]string, len(misfits))
	for i, m := range misfits {
		drop[m.UUID], ids[i] = true, m.UUID
	}
	if err := c.checkHold(ctx, "dropping misfits from", sg.Key); err != nil {
		return sg, err
	}
	if err := c.store(ctx).Update(ctx, sg.Key, groupstore.Update{IfVersion: sg.Version, Release: ids}); err != nil {
		return sg, fmt.Errorf("%s: dropping %d misfit(s) from group %q: %w", c.kind.Name, len(ids), sg.Key, err)
	}
	kept := make([]groupstore.Message, 0, len(sg.Messages)-len(ids))
	for _, m := range sg.Messages {
		if !drop[m.UUID] {
			kept = append(kept, m)
		}
	}
	sg.Messages, sg.Size = kept, len(kept)
	sg.Version++
	sg.Releases++
	return sg, nil
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

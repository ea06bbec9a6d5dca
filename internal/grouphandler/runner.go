package grouphandler

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/lockreg/lockreg/groupstore"
	tel "github.com/lockreg/lockreg/internal/telemetry"
)

// claimBatch is how many due groups the timeout runner claims at a time.
const claimBatch = 100

// RunTimeouts expires due groups until ctx is done, then returns nil. Every
// PollInterval it claims due groups and hands each that is still due to
// expire, under the group lock (see expireOne). Failures are logged and
// retried when the claim's lease ends.
func (c *Core) RunTimeouts(ctx context.Context, expire func(context.Context, groupstore.Group) error) error {
	c.announce()
	t := time.NewTicker(c.s.PollInterval)
	defer t.Stop()
	for {
		c.expireDue(ctx, expire)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// claimLease outlasts the longest a runner may hold a claim: a lock wait
// and a locked expiry, with a poll's slack.
func (c *Core) claimLease() time.Duration {
	return 2*c.s.LockTimeout + c.s.PollInterval
}

// expireWait bounds the runner's wait for a group lock: LockTimeout, but at
// most a second or PollInterval if that is longer. A group it gives up on
// waits for its claim to lapse (claimLease), so the wait must outlast an
// uncontended acquisition on a loaded database, not only a poll; the
// bound keeps one busy group from holding up the rest of the batch.
func (c *Core) expireWait() time.Duration {
	return min(c.s.LockTimeout, max(c.s.PollInterval, time.Second))
}

// expireDue claims and expires due groups until none is left or ctx ends.
func (c *Core) expireDue(ctx context.Context, expire func(context.Context, groupstore.Group) error) {
	for ctx.Err() == nil {
		claims, err := c.store(ctx).ClaimDue(ctx, claimBatch, c.claimLease())
		if err != nil {
			if ctx.Err() == nil {
				c.repeated("claim", "Claiming due groups failed", err, watermill.LogFields{})
			}
			return
		}
		for _, due := range claims {
			if err := c.expireOne(ctx, due, expire); err != nil && ctx.Err() == nil {
				c.repeated("expire", "Expiring group failed; retrying later", err, watermill.LogFields{"group": due.Key})
			}
		}
		if len(claims) < claimBatch {
			return
		}
	}
}

// expireOne takes the lock of the due group, waiting at most expireWait,
// and calls expire with the lock context and the group, unless the group
// is busy (whoever holds it changes it, or the claim lapses), gone, or
// changed since it fell due (its new due time stands).
func (c *Core) expireOne(ctx context.Context, due groupstore.DueGroup, expire func(context.Context, groupstore.Group) error) (err error) {
	if ctx, span := c.tel.startExpiry(ctx, due.Key); span != nil {
		defer func() { tel.EndSpan(span, err) }()
		return c.expireLocked(ctx, due, expire)
	}
	return c.expireLocked(ctx, due, expire)
}

// expireLocked is expireOne without its span.
func (c *Core) expireLocked(ctx context.Context, due groupstore.DueGroup, expire func(context.Context, groupstore.Group) error) error {
	err := thenDeferred(ctx, func(ctx context.Context) error {
		return c.expireUnderLock(ctx, due, expire)
	})
	if errors.Is(err, c.kind.Errors.LockTimeout) {
		return nil
	}
	return err
}

// expireUnderLock is expireLocked's work under the group lock; what
// expire defers with AfterUnlock runs after it.
func (c *Core) expireUnderLock(ctx context.Context, due groupstore.DueGroup, expire func(context.Context, groupstore.Group) error) error {
	return c.withLock(ctx, due.Key, c.expireWait(), func(lctx context.Context) error {
		sg, err := c.Get(lctx, due.Key)
		if errors.Is(err, groupstore.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if sg.Version != due.Version {
			return nil
		}
		if err := expire(lctx, sg); err != nil {
			return err
		}
		c.tel.expiredGroup()
		return nil
	})
}

// repeated logs a failure of the runner that may repeat at every poll: of
// each kind, the first and then one per telemetry.RepeatInterval, with
// the count of those held back.
func (c *Core) repeated(kind, msg string, err error, fields watermill.LogFields) {
	ok, held := c.limit.Allow(kind)
	if !ok {
		return
	}
	if held > 0 {
		fields = fields.Add(watermill.LogFields{tel.LogSuppressed: held})
	}
	c.logger.Error(msg, err, fields)
}

// runnerSubscriber runs the timeout runner for as long as the handler's
// subscription lives.
type runnerSubscriber struct {
	message.Subscriber
	run func(context.Context) error

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
			_ = s.run(rctx)
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

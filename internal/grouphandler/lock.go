package grouphandler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
)

// WithLock runs work on group key under the group lock, waiting for the
// lock at most Settings.LockTimeout, and returns work's error, or an error
// wrapping Errors.LockTimeout if the lock was not taken in time. The
// context work gets ends, with cause Errors.LockLost, when the hold ends or
// may have ended ([registry.Lock.Done]); the Core's methods then publish
// and record nothing more, and WithLock marks work's error as caused by the
// lost lock. It costs a lock acquisition and release and a goroutine that
// watches the hold.
func (c *Core) WithLock(ctx context.Context, key string, work func(context.Context) error) error {
	return c.withLock(ctx, key, c.s.LockTimeout, work)
}

// withLock is WithLock with a wait of its own.
func (c *Core) withLock(ctx context.Context, key string, wait time.Duration, work func(context.Context) error) error {
	l := c.s.Locks.Obtain(c.s.LockPrefix + key)
	wctx, cancel := context.WithTimeout(ctx, wait)
	ok, err := l.TryLockContext(wctx)
	cancel()
	if err != nil {
		return fmt.Errorf("%s: locking group %q: %w", c.kind.Name, key, err)
	}
	if !ok {
		return fmt.Errorf("%w: group %q after %v", c.kind.Errors.LockTimeout, key, wait)
	}
	defer func() {
		// The message context ends with its ack; the unlock must outlive it.
		if err := l.UnlockContext(context.WithoutCancel(ctx)); err != nil {
			c.logger.Error("Unlocking group failed; another instance may have changed it", err,
				watermill.LogFields{"group": key})
		}
	}()
	held, lost := context.WithCancelCause(ctx)
	done, stop := l.Done(), make(chan struct{})
	watching := make(chan struct{})
	go func() {
		defer close(watching)
		select {
		case <-done:
			lost(c.kind.Errors.LockLost)
		case <-stop:
		}
	}()
	err = work(held)
	close(stop)
	<-watching
	if err != nil && errors.Is(context.Cause(held), c.kind.Errors.LockLost) && !errors.Is(err, c.kind.Errors.LockLost) {
		err = fmt.Errorf("%w: %w", c.kind.Errors.LockLost, err)
	}
	lost(nil)
	return err
}

// holdErr returns why work under the group lock of lctx must stop: an
// error wrapping Errors.LockLost once the hold may be gone, the context's
// cause once it is done otherwise, and nil while both last. The Core checks
// it before it publishes, so that nothing goes out without the lock.
func holdErr(lctx context.Context) error {
	return context.Cause(lctx)
}

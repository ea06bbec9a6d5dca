package tasklock

import (
	"context"
	"fmt"
	"time"

	"github.com/lockreg/lockreg/registry"
)

// frame is one task lock carried by a context; parent is the enclosing one
// of a nested run. A frame with a nil lock comes from AssumeLocked.
type frame struct {
	lock   *Lock
	parent *frame
}

type frameKey struct{}

func withFrame(ctx context.Context, f *frame) context.Context {
	return context.WithValue(ctx, frameKey{}, f)
}

func innermost(ctx context.Context) *frame {
	f, _ := ctx.Value(frameKey{}).(*frame)
	return f
}

// AssertLocked returns nil if ctx carries a task lock, that is if it is, or
// derives from, the context [Executor.Run] gives a task, and the lock is
// neither released nor known to be lost. Code that must only run under a
// task lock calls it first (ShedLock's LockAssert.assertLocked). It returns
// an error wrapping [ErrNotLocked] when ctx carries no lock or the lock was
// released, and one wrapping [registry.ErrLockLost] when the lease is lost
// or about to expire. Like ShedLock's, it does not check which task's lock
// is held. It costs a context lookup and performs no I/O.
func AssertLocked(ctx context.Context) error {
	f := innermost(ctx)
	switch {
	case f == nil:
		return fmt.Errorf("tasklock: assert locked: %w", ErrNotLocked)
	case f.lock == nil:
		return nil // AssumeLocked
	case f.lock.unlocked.Load():
		return fmt.Errorf("tasklock: assert locked %q: released: %w", f.lock.name, ErrNotLocked)
	}
	select {
	case <-f.lock.done:
		return fmt.Errorf("tasklock: assert locked %q: lease expiring or lost: %w", f.lock.name, registry.ErrLockLost)
	default:
		return nil
	}
}

// AssumeLocked returns a context for which [AssertLocked] returns nil and
// [Extend] does nothing, without any lock: a test helper for unit tests of
// code that asserts it runs under a task lock (ShedLock's
// LockAssert.TestHelper.makeAllAssertsPass). Do not use it in production
// code. Run called with it still takes its lock.
func AssumeLocked(ctx context.Context) context.Context {
	return withFrame(ctx, &frame{parent: innermost(ctx)})
}

// LockFrom returns the innermost task lock ctx carries, or nil.
func LockFrom(ctx context.Context) *Lock {
	if f := innermost(ctx); f != nil {
		return f.lock
	}
	return nil
}

// Extend extends the innermost task lock ctx carries: [Lock.Extend] on it,
// ShedLock's LockExtender.extendActiveLock. It returns an error wrapping
// [ErrNotLocked] when ctx carries no lock, and one wrapping
// [registry.ErrLockLost] when the lease has already expired, which it never
// extends. On a context from [AssumeLocked] it returns nil.
func Extend(ctx context.Context, lockAtMostFor, lockAtLeastFor time.Duration) error {
	f := innermost(ctx)
	switch {
	case f == nil:
		return fmt.Errorf("tasklock: extend: %w", ErrNotLocked)
	case f.lock == nil:
		return nil
	}
	return f.lock.Extend(ctx, lockAtMostFor, lockAtLeastFor)
}

package registry

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Lock is a keyed lock obtained from a [LockRegistry]. Holding it means
// holding both the local per-key primitive and an unexpired lease in the
// registry's repository.
//
// A Lock is not reentrant: locking it again from the goroutine that holds it
// waits for that goroutine. It may be unlocked from any goroutine.
//
// The context-free methods (Lock, TryLock, Unlock) make it a [sync.Locker];
// they panic where the context forms would return a non-transient error,
// and so suit code that treats the database being unusable as fatal. Prefer
// the context forms elsewhere.
type Lock interface {
	sync.Locker

	// LockContext waits until the lock is held with the registry's TTL or
	// ctx is done. Transient repository errors are retried with capped,
	// jittered backoff (and reported to the error handler); other errors
	// are returned. It returns ctx's error, wrapped, when ctx ends first,
	// and ErrClosed when the registry closes.
	LockContext(ctx context.Context) error

	// LockTTL is LockContext with a lease of ttl instead of the registry's
	// TTL (Spring 7's lock(Duration)); later Renew calls keep using ttl.
	LockTTL(ctx context.Context, ttl time.Duration) error

	// TryLock makes one attempt to take the lock and reports whether it
	// did. It reports false only when the lock is held or being taken,
	// here or elsewhere: if an earlier call of this process that failed is
	// still cleaning up in the background (releasing what an abandoned
	// statement may have taken, leaving the key's queue), TryLock waits
	// for that, at most about the TTL, and then asks the repository.
	// Transient repository errors count as a failed attempt and go to the
	// error handler; it panics on other errors and on a closed registry.
	TryLock() bool

	// TryLockContext reports whether it took the lock. When ctx has a
	// deadline it waits for the lock until that deadline and returns false,
	// with a nil error, by the deadline (not up to an idle interval later).
	// Without a deadline it makes one attempt, as TryLock does (waiting,
	// like it, for a clean-up in progress). It returns
	// an error, with false, when ctx is canceled, when the registry is
	// closed, and on non-transient repository errors; a transient error of
	// the single attempt is returned too.
	TryLockContext(ctx context.Context) (bool, error)

	// TryLockTTL is TryLockContext with a lease of ttl.
	TryLockTTL(ctx context.Context, ttl time.Duration) (bool, error)

	// Unlock releases the lock. It panics if the lock is not held, as
	// sync.Mutex does. It never panics for a lost lease: the local lock is
	// released in every case, and a lost lease or a release that failed is
	// reported to the registry's error handler. Transient errors are
	// retried until the lease would have expired anyway.
	Unlock()

	// UnlockContext releases the lock and reports what Unlock would pass to
	// the error handler: an error wrapping ErrLockLost when the lease had
	// expired and is no longer this holder's, so the guarded data may have
	// been changed by another process; also when failing releases were
	// retried until the lease ran out, as the hold then ended by expiry.
	// It returns ErrNotHeld, without
	// panicking, if the lock is not held. The local lock is released in
	// every other case.
	UnlockContext(ctx context.Context) error

	// Renew extends the held lease by the TTL it was taken with (Spring's
	// renewLock). It returns ErrNotHeld if the lock is not held and an error
	// wrapping ErrLockLost if the lease already expired: renewal never
	// revives an expired lease. Done closes once per hold and never
	// reopens, so once it has closed (the safety margin passed, or a
	// renewal found the lease lost) the hold counts as lost: Renew then
	// returns an error wrapping ErrLockLost without asking the repository,
	// and so does a renewal whose reply arrives after Done closed. Unlock
	// and lock again to go on. The lock stays held locally in all these
	// cases until unlocked. Transient errors are retried until ctx is done
	// or the lease has expired.
	Renew(ctx context.Context) error

	// RenewTTL is Renew with a new lease duration, used from then on.
	RenewTTL(ctx context.Context, ttl time.Duration) error

	// Token returns the fencing token of the current hold: greater than the
	// token of every earlier hold of the key, in any process. Pass it to
	// the storage the lock guards and let it refuse writes that carry a
	// token lower than the last one it saw: a holder that stalled past its
	// lease is then refused. It returns 0 if the lock is not held or the
	// repository issues no tokens.
	Token() int64

	// Done returns a channel that is closed when the current hold ends or
	// may have ended: on unlock, when a renewal finds the lease lost, and a
	// safety margin (a fifth of the TTL) before the lease would expire
	// unless it has been renewed by then. Work guarded by the lock should
	// stop when it closes. It closes at most once per hold and never
	// reopens: a later Renew reports ErrLockLost. For a lock that is not
	// held it returns a closed channel. With [WithKeepAlive] leases are
	// renewed in the background, so Done closes only when renewal fails for
	// too long.
	Done() <-chan struct{}

	// Key returns the key the lock was obtained for.
	Key() string
}

// lockHandle is the [Lock] that Obtain returns. It keeps no state: each
// call finds the key's live keyState in the registry, so a handle
// obtained before its key's state was evicted and made anew still
// excludes, and reaches, the new one.
type lockHandle struct {
	reg *Registry
	key string
}

// closedChan is what Done returns for a lock that is not held.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func (l *lockHandle) Key() string { return l.key }

func (l *lockHandle) Lock() {
	if err := l.LockContext(context.Background()); err != nil {
		panic(err)
	}
}

func (l *lockHandle) LockContext(ctx context.Context) error {
	return l.LockTTL(ctx, l.reg.opts.ttl)
}

func (l *lockHandle) LockTTL(ctx context.Context, ttl time.Duration) error {
	_, err := l.take(ctx, ttl, waitAlways)
	return err
}

func (l *lockHandle) TryLock() bool {
	ok, err := l.TryLockContext(context.Background())
	if err != nil {
		if errors.Is(err, ErrTransient) {
			l.reg.report(l.key, err)
			return false
		}
		panic(err)
	}
	return ok
}

func (l *lockHandle) TryLockContext(ctx context.Context) (bool, error) {
	return l.TryLockTTL(ctx, l.reg.opts.ttl)
}

func (l *lockHandle) TryLockTTL(ctx context.Context, ttl time.Duration) (bool, error) {
	if _, ok := ctx.Deadline(); ok {
		return l.take(ctx, ttl, waitUntilDeadline)
	}
	return l.take(ctx, ttl, waitNever)
}

// take acquires the key's local primitive and then its lease.
func (l *lockHandle) take(ctx context.Context, ttl time.Duration, mode waitMode) (ok bool, err error) {
	if ttl <= 0 {
		return false, fmt.Errorf("registry: lock %q with ttl %v: %w", l.key, ttl, ErrInvalidTTL)
	}
	if t := l.reg.tel; t != nil {
		var op *acquireOp
		ctx, op = t.startAcquire(ctx, l.key)
		defer func() { op.end(ok, err) }()
	}
	k, err := l.reg.pin(l)
	if err != nil {
		return false, wrap("lock", l.key, err)
	}
	if ok, err := k.takeLocal(ctx, mode); !ok {
		l.reg.unpin(k)
		return false, wrap("lock", l.key, err)
	}
	return k.takeLease(ctx, ttl, mode)
}

func (l *lockHandle) Unlock() {
	if err := l.UnlockContext(context.Background()); err != nil {
		if errors.Is(err, ErrNotHeld) {
			panic(fmt.Sprintf("registry: unlock of unlocked lock %q", shortKey(l.key)))
		}
		l.reg.report(l.key, err)
	}
}

func (l *lockHandle) UnlockContext(ctx context.Context) error {
	k := l.reg.holder(l.key)
	if k == nil {
		return wrap("unlock", l.key, ErrNotHeld)
	}
	h := k.unhold()
	if h == nil {
		return wrap("unlock", l.key, ErrNotHeld)
	}
	defer k.releaseLocal()
	return h.release(ctx)
}

func (l *lockHandle) Renew(ctx context.Context) error {
	return l.renew(ctx, 0)
}

func (l *lockHandle) RenewTTL(ctx context.Context, ttl time.Duration) error {
	if ttl <= 0 {
		return fmt.Errorf("registry: renew %q with ttl %v: %w", l.key, ttl, ErrInvalidTTL)
	}
	return l.renew(ctx, ttl)
}

// renew renews the current hold for ttl, or for its own TTL if ttl is 0.
func (l *lockHandle) renew(ctx context.Context, ttl time.Duration) error {
	h := l.current()
	if h == nil {
		return wrap("renew", l.key, ErrNotHeld)
	}
	return h.renew(ctx, ttl)
}

func (l *lockHandle) Token() int64 {
	if h := l.current(); h != nil {
		return h.token
	}
	return 0
}

func (l *lockHandle) Done() <-chan struct{} {
	if h := l.current(); h != nil {
		return h.doneChan()
	}
	return closedChan
}

// current returns the key's current hold, nil when the key is not held.
func (l *lockHandle) current() *hold {
	if k := l.reg.holder(l.key); k != nil {
		return k.current()
	}
	return nil
}

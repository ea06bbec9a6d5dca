package tasklock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockreg/lockreg/internal/backoff"
	tel "github.com/lockreg/lockreg/internal/telemetry"
	"github.com/lockreg/lockreg/registry"
)

var (
	// ErrLocked reports that a task's lock is held elsewhere (or, after a
	// run with lockAtLeastFor, still reserved), so the task was not run.
	ErrLocked = errors.New("tasklock: locked")

	// ErrNotLocked reports that a context carries no task lock, or that a
	// lock was already unlocked.
	ErrNotLocked = errors.New("tasklock: not locked")

	// ErrInvalidConfig reports an empty task name or a duration out of
	// range.
	ErrInvalidConfig = errors.New("tasklock: invalid lock configuration")
)

// A Releaser is a [registry.Repository] that can end a lease so that it
// stays taken until atLeast after its acquisition, with the expiry computed
// by the storage's own clock; *jdbc.LockRepository is one. ReleaseAfter
// must hand the lease to no client (so that neither this client nor another
// takes it before the expiry), return an error wrapping
// [registry.ErrLockLost] when the lease is not this client's, and one
// wrapping [errors.ErrUnsupported] when it cannot honour atLeast.
type Releaser interface {
	ReleaseAfter(ctx context.Context, key string, atLeast time.Duration) error
}

// Executor runs tasks under named locks. It is safe for concurrent use.
// Make one per instance with [New] (one client of a shared lock table) or
// [NewLocal], and close it with [Executor.Close].
type Executor struct {
	reg *registry.Registry
	rel Releaser // nil: lockAtLeastFor is kept by holding the lock locally
	tel *taskTel // nil without the registry's meter provider
	log *tel.Logger

	mu      sync.Mutex
	closed  bool
	pending map[*Lock]*time.Timer // fallback lockAtLeastFor: unlocks to come
}

// New returns an executor whose locks are leases in repo, taken through a
// [registry.Registry] made with opts: [registry.WithTTL] sets the default
// lockAtMostFor, [registry.WithKeepAlive] renews leases of long tasks in
// the background, [registry.WithMeterProvider] counts runs
// ("lockreg.task.runs", by outcome: ran, skipped or error) beside the
// registry's own metrics, [registry.WithLogger] logs what has no caller,
// and [registry.WithErrorHandler] receives errors that have
// no caller. The executor owns repo; [Executor.Close] closes it. Give each
// instance its own repository (its own client id).
//
// If repo implements [Releaser], as *jdbc.LockRepository does, lockAtLeastFor
// is written to the storage at release, on the storage's clock. Otherwise
// the executor keeps holding the lock after the task until lockAtLeastFor
// has passed by the local monotonic clock, renewing the lease to cover that
// time, and releases it then (or at Close).
//
// New returns the errors of [registry.New]: one wrapping
// [registry.ErrInvalidOption] if repo is nil or an option is invalid.
func New(repo registry.Repository, opts ...registry.Option) (*Executor, error) {
	reg, err := registry.New(repo, opts...)
	if err != nil {
		return nil, fmt.Errorf("tasklock: %w", err)
	}
	rel, _ := repo.(Releaser)
	return &Executor{reg: reg, rel: rel, pending: make(map[*Lock]*time.Timer),
		tel: newTaskTel(reg.MeterProvider()), log: tel.NewLogger(reg.Logger())}, nil
}

// NewLocal returns an executor whose locks exclude runs within this process
// only, for tests and single instances; it needs no database. Leases never
// expire, so tasks' contexts are cancelled only by the safety margin of
// lockAtMostFor. lockAtLeastFor is kept by holding the lock until it has
// passed, as for any repository that is not a [Releaser]. It returns the
// errors of [New].
func NewLocal(opts ...registry.Option) (*Executor, error) {
	return New(registry.NewLocalRepository(), opts...)
}

// Close releases the locks whose lockAtLeastFor the executor is still
// keeping in memory (only for repositories that are not a [Releaser]; such
// locks end early), refuses later runs with an error wrapping
// [registry.ErrClosed], and closes the registry and its repository. Locks
// held by running tasks stay held until the tasks end. Closing a closed
// executor returns nil.
func (e *Executor) Close(ctx context.Context) error {
	e.mu.Lock()
	e.closed = true
	pending := e.pending
	e.pending = make(map[*Lock]*time.Timer)
	e.mu.Unlock()
	var errs []error
	for l, t := range pending {
		t.Stop()
		l.finish(ctx)
	}
	errs = append(errs, e.reg.Close(ctx))
	return errors.Join(errs...)
}

// An Option configures one lock: a run of [Executor.Run] or
// [Executor.TryLock].
type Option func(*config)

type config struct {
	atMost, atLeast time.Duration
	atMostSet       bool
}

// LockAtMostFor sets the lease: how long the lock lasts if it is not
// released, renewed or extended, for example because the instance died
// (ShedLock's lockAtMostFor). The default is the registry's TTL. It must be
// positive and not less than lockAtLeastFor. The task's context is
// cancelled a fifth of d before the lease ends unless it is extended.
func LockAtMostFor(d time.Duration) Option {
	return func(c *config) { c.atMost, c.atMostSet = d, true }
}

// LockAtLeastFor keeps the lock taken until d after it was taken, even if
// the task finished sooner (ShedLock's lockAtLeastFor); runs asked for
// meanwhile, by any instance, skip. The default is 0: the lock is free as
// soon as the task returns. It must not be negative.
func LockAtLeastFor(d time.Duration) Option {
	return func(c *config) { c.atLeast = d }
}

func (e *Executor) config(name string, opts []Option) (config, error) {
	var c config
	for _, o := range opts {
		o(&c)
	}
	switch {
	case name == "":
		return c, fmt.Errorf("%w: empty task name", ErrInvalidConfig)
	case c.atMostSet && c.atMost <= 0:
		return c, fmt.Errorf("%w: lockAtMostFor %v of %q is not positive", ErrInvalidConfig, c.atMost, name)
	case c.atLeast < 0:
		return c, fmt.Errorf("%w: lockAtLeastFor %v of %q is negative", ErrInvalidConfig, c.atLeast, name)
	case c.atMostSet && c.atLeast > c.atMost:
		return c, fmt.Errorf("%w: lockAtLeastFor %v of %q exceeds lockAtMostFor %v", ErrInvalidConfig, c.atLeast, name, c.atMost)
	}
	return c, nil
}

// Run runs task under the lock named name if it can take the lock at once,
// and reports whether it ran, with the task's error. When the lock is held
// elsewhere it returns false and a nil error without waiting.
//
// The task receives a context derived from ctx that carries the lock (for
// [AssertLocked] and [Extend]) and is cancelled, with a cause wrapping
// [registry.ErrLockLost], when the lease is lost or about to expire. When
// the task returns, or panics, the lock is released, honouring
// lockAtLeastFor; the release is not cancelled with ctx. If the release
// finds the lease lost (the task outlived it, so another instance may have
// run too), Run returns an error wrapping registry.ErrLockLost, joined with
// the task's error.
//
// Run is reentrant, as ShedLock's executor is: when ctx already carries an
// unreleased lock of this executor named name, task runs at once under that
// lock. A nested run of another name takes that lock too.
//
// Taking the lock is one repository call (one SQL statement with package
// jdbc); so is releasing it, plus one more with lockAtLeastFor.
func (e *Executor) Run(ctx context.Context, name string, task func(ctx context.Context) error, opts ...Option) (ran bool, err error) {
	for f := innermost(ctx); f != nil; f = f.parent {
		if f.lock != nil && f.lock.e == e && f.lock.name == name && !f.lock.unlocked.Load() {
			return true, task(ctx)
		}
	}
	l, err := e.TryLock(ctx, name, opts...)
	e.tel.run(ctx, name, err)
	if errors.Is(err, ErrLocked) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	tctx, stop := l.taskContext(ctx)
	defer func() {
		stop()
		if uerr := l.Unlock(context.WithoutCancel(ctx)); uerr != nil {
			err = errors.Join(err, uerr)
		}
	}()
	return true, task(tctx)
}

// TryLock makes one attempt to take the lock named name and returns it, or
// an error wrapping [ErrLocked] when it is held elsewhere. It never waits,
// even when ctx has a deadline. The caller must call [Lock.Unlock]. Use it
// where a scheduler, not Run, calls the task (see package gocronlock).
func (e *Executor) TryLock(ctx context.Context, name string, opts ...Option) (*Lock, error) {
	c, err := e.config(name, opts)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("tasklock: lock %q: %w", name, err)
	}
	// TryLock* waits until ctx's deadline when it has one; one attempt is
	// wanted, still cancelled with ctx.
	actx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancel(nil)
	defer context.AfterFunc(ctx, func() { cancel(context.Cause(ctx)) })()

	rl := e.reg.Obtain(name)
	start := time.Now()
	var ok bool
	if c.atMostSet {
		ok, err = rl.TryLockTTL(actx, c.atMost)
	} else {
		ok, err = rl.TryLockContext(actx)
	}
	switch {
	case err != nil:
		return nil, fmt.Errorf("tasklock: lock %q: %w", name, err)
	case !ok:
		return nil, fmt.Errorf("tasklock: lock %q: %w", name, ErrLocked)
	}
	return &Lock{e: e, rl: rl, name: name, start: start, atLeast: c.atLeast, done: rl.Done(), token: rl.Token()}, nil
}

// Lock is a held task lock, from [Executor.TryLock] or, inside a task, from
// the context Run passes. Its methods are safe for concurrent use.
type Lock struct {
	e     *Executor
	rl    registry.Lock
	name  string
	start time.Time // just before the acquisition was sent
	done  <-chan struct{}
	token int64

	mu         sync.Mutex // serializes Extend and Unlock
	atLeast    time.Duration
	unlocked   atomic.Bool
	finishOnce sync.Once // a deferred unlock (no Releaser)
}

// Name returns the task name the lock was taken for.
func (l *Lock) Name() string { return l.name }

// Token returns the lease's fencing token (see [registry.Lock.Token]): pass
// it to storage that refuses writes with a token lower than the last it saw.
func (l *Lock) Token() int64 { return l.token }

// Done returns a channel that is closed when the lease is lost, about to
// expire unless extended (a fifth of lockAtMostFor before, by the local
// clock), or released.
func (l *Lock) Done() <-chan struct{} { return l.done }

// Extend extends the lease to lockAtMostFor from now and replaces
// lockAtLeastFor, which still counts from the acquisition (as in
// ShedLock's DB-time mode), so the lock stays taken after the task until
// max(acquisition + lockAtLeastFor, release). It is ShedLock's
// LockExtender.extendActiveLock. It never extends a lease that has already
// expired: it then returns an error wrapping [registry.ErrLockLost] (and
// the task's context is cancelled). It returns an error wrapping
// [ErrNotLocked] after Unlock and [ErrInvalidConfig] for a lockAtMostFor
// that is not positive or a negative lockAtLeastFor. It is one repository
// call.
func (l *Lock) Extend(ctx context.Context, lockAtMostFor, lockAtLeastFor time.Duration) error {
	switch {
	case lockAtMostFor <= 0:
		return fmt.Errorf("%w: lockAtMostFor %v of %q is not positive", ErrInvalidConfig, lockAtMostFor, l.name)
	case lockAtLeastFor < 0:
		return fmt.Errorf("%w: lockAtLeastFor %v of %q is negative", ErrInvalidConfig, lockAtLeastFor, l.name)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.unlocked.Load() {
		return fmt.Errorf("tasklock: extend %q: %w", l.name, ErrNotLocked)
	}
	if err := l.rl.RenewTTL(ctx, lockAtMostFor); err != nil {
		return fmt.Errorf("tasklock: extend %q: %w", l.name, err)
	}
	l.atLeast = lockAtLeastFor
	return nil
}

// Unlock releases the lock, keeping it taken until lockAtLeastFor after the
// acquisition. With a [Releaser] repository that is one ReleaseAfter call,
// on the storage's clock, retried on transient errors while the lease
// lasts, plus the registry's release (which then finds the row handed
// over); if ReleaseAfter fails, the lock is released at once and the error
// returned. Otherwise the lease is renewed to cover what remains of
// lockAtLeastFor and released when that has passed, by a timer.
//
// It returns an error wrapping [registry.ErrLockLost] when the lease had
// been lost, and one wrapping [ErrNotLocked] when called again.
func (l *Lock) Unlock(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.unlocked.CompareAndSwap(false, true) {
		return fmt.Errorf("tasklock: unlock %q: %w", l.name, ErrNotLocked)
	}
	if l.atLeast <= 0 {
		return l.unlockNow(ctx)
	}
	if l.e.rel != nil {
		err := l.releaseAfter(ctx)
		if err == nil {
			// The row is handed over: the registry's release finds it
			// gone and only ends the local hold.
			if uerr := l.rl.UnlockContext(ctx); uerr != nil && !errors.Is(uerr, registry.ErrLockLost) {
				return fmt.Errorf("tasklock: unlock %q: %w", l.name, uerr)
			}
			return nil
		}
		if !errors.Is(err, errors.ErrUnsupported) {
			return errors.Join(fmt.Errorf("tasklock: unlock %q: %w", l.name, err), l.unlockNow(ctx))
		}
	}
	return l.unlockLater(ctx)
}

// releaseAfter calls ReleaseAfter, retrying transient errors with backoff
// until the lease's Done closes or ctx ends.
func (l *Lock) releaseAfter(ctx context.Context) error {
	bo := backoff.New(10*time.Millisecond, time.Second)
	for {
		err := l.e.rel.ReleaseAfter(ctx, l.name, l.atLeast)
		if err == nil || !errors.Is(err, registry.ErrTransient) {
			return err
		}
		if !backoff.Sleep(ctx, bo.Next(), l.done) {
			return err
		}
	}
}

// unlockNow releases the lease at once.
func (l *Lock) unlockNow(ctx context.Context) error {
	if err := l.rl.UnlockContext(ctx); err != nil {
		return fmt.Errorf("tasklock: unlock %q: %w", l.name, err)
	}
	return nil
}

// unlockLater keeps the lock until lockAtLeastFor has passed since the
// acquisition by the local monotonic clock, renewing the lease to cover it.
func (l *Lock) unlockLater(ctx context.Context) error {
	remaining := l.atLeast - time.Since(l.start)
	if remaining <= 0 {
		return l.unlockNow(ctx)
	}
	if err := l.rl.RenewTTL(ctx, remaining); err != nil {
		return errors.Join(fmt.Errorf("tasklock: unlock %q: %w", l.name, err), l.unlockNow(ctx))
	}
	e := l.e
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return l.unlockNow(ctx)
	}
	e.pending[l] = time.AfterFunc(remaining, func() {
		e.mu.Lock()
		delete(e.pending, l)
		e.mu.Unlock()
		l.finish(context.Background())
	})
	return nil
}

// finish ends a lock kept for lockAtLeastFor, once, whether its timer or
// Close gets there first. Its error has no caller and is logged.
func (l *Lock) finish(ctx context.Context) {
	l.finishOnce.Do(func() {
		if err := l.unlockNow(ctx); err != nil {
			l.e.log.Error("tasklock: deferred unlock", err, tel.LogKey, l.name)
		}
	})
}

// taskContext returns the context a task runs with: ctx carrying l,
// cancelled with a cause wrapping registry.ErrLockLost when l's Done
// closes. stop ends the watch and cancels the context.
func (l *Lock) taskContext(ctx context.Context) (context.Context, func()) {
	tctx, cancel := context.WithCancelCause(withFrame(ctx, &frame{lock: l, parent: innermost(ctx)}))
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case <-l.done:
			cancel(fmt.Errorf("tasklock: lock %q: lease expiring or lost: %w", l.name, registry.ErrLockLost))
		case <-quit:
		}
	}()
	return tctx, func() {
		close(quit)
		wg.Wait()
		cancel(nil)
	}
}

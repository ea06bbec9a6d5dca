package registry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	tel "github.com/lockreg/lockreg/internal/telemetry"
)

// LockRegistry hands out locks by key. Obtaining a lock costs no I/O; the
// same key always yields locks that exclude each other.
type LockRegistry interface {
	Obtain(key string) Lock
}

// Registry is a [LockRegistry] whose locks hold leases in a [Repository].
// It is safe for concurrent use. Make one with [New] or [NewLocal].
type Registry struct {
	repo Repository
	opts options
	tel  *telemetry  // nil when it reports no metrics or spans
	log  *tel.Logger // for errors without a caller and an error handler

	sharedBound atomic.Pointer[sharedBound] // see bound; nil until the first statement

	mu     sync.Mutex
	active map[string]*keyState // held or awaited: never evicted
	idle   *idleCache           // neither held nor awaited
	closed bool
	done   chan struct{} // closed by Close: wakes every waiter
	// background counts goroutines that Close waits for, through drained:
	// clean-ups of abandoned acquisitions and keep-alive renewals.
	background int
	drained    chan struct{}
}

var _ LockRegistry = (*Registry)(nil)

// New returns a registry whose locks take leases in repo. The registry owns
// repo from then on: [Registry.Close] closes it, and no other registry may
// use it.
//
// New returns an error wrapping [ErrInvalidOption] if repo is nil or an
// option is invalid (a TTL, idle interval or capacity that is not positive,
// a nil error handler); an invalid TTL also wraps [ErrInvalidTTL]. It
// performs no I/O.
func New(repo Repository, opts ...Option) (*Registry, error) {
	if repo == nil {
		return nil, fmt.Errorf("registry: New with a nil Repository: %w", ErrInvalidOption)
	}
	o := defaultOptions()
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	d := describe(repo)
	t, err := newTelemetry(&o, d)
	if err != nil {
		return nil, fmt.Errorf("registry: %w: WithMeterProvider: %w", ErrInvalidOption, err)
	}
	return &Registry{
		repo:   repo,
		opts:   o,
		tel:    t,
		log:    tel.NewLogger(o.logger, logFields(d)...),
		active: make(map[string]*keyState),
		idle:   newIdleCache(o.cacheCapacity),
		done:   make(chan struct{}),
	}, nil
}

// NewLocal returns a registry whose locks exclude each other only within this
// process: Spring's DefaultLockRegistry, for tests and single instances. It
// needs no database; leases never expire and renewals always succeed. Unlike
// Spring's, distinct keys never share a lock. It returns the errors of [New]
// for invalid options.
func NewLocal(opts ...Option) (*Registry, error) {
	return New(NewLocalRepository(), opts...)
}

// NewLocalRepository returns the repository of [NewLocal]: it grants every
// lease at once, so that the registry's per-key local lock alone provides
// exclusion, within one process. Its leases never expire and its tokens
// increase across all its keys. It is for executors and handlers built on a
// repository (package tasklock's NewLocal) that want NewLocal's behaviour.
func NewLocalRepository() Repository { return new(localRepository) }

// Obtain returns the lock for key. It performs no I/O and never fails: every
// string, including the empty one, is a valid key. While a key's lock is
// cached, Obtain returns the same object; once an idle lock has been evicted,
// Obtain returns a new object, which still excludes the old one.
func (r *Registry) Obtain(key string) Lock {
	r.mu.Lock()
	defer r.mu.Unlock()
	if k, ok := r.active[key]; ok {
		return k.handle
	}
	if k, ok := r.idle.get(key); ok {
		return k.handle
	}
	l := &lockHandle{reg: r, key: key}
	r.idle.add(newKeyState(l))
	return l
}

// ExpireUnusedOlderThan drops idle lock objects last used at least age ago
// (all of them for a negative age). It never touches held or awaited locks
// and performs no I/O; it costs time linear in the number of cached locks.
func (r *Registry) ExpireUnusedOlderThan(age time.Duration) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.idle.each(func(k *keyState) {
		if now.Sub(k.lastUsed) >= age {
			r.idle.remove(k)
		}
	})
}

// Close stops the registry: goroutines waiting for a lock return [ErrClosed]
// (or, in [Lock.Lock], panic with it) and later lock attempts fail with it.
// Locks held at Close stay held until they are unlocked, which still works.
// Close then waits, until ctx is done, for clean-ups of abandoned attempts,
// and closes the repository, which releases this client's leftover leases
// but none that are held. Closing a closed registry returns nil.
func (r *Registry) Close(ctx context.Context) error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	close(r.done)
	var drained chan struct{}
	if r.background > 0 {
		r.drained = make(chan struct{})
		drained = r.drained
	}
	r.mu.Unlock()
	if drained != nil {
		select {
		case <-drained:
		case <-ctx.Done():
			return fmt.Errorf("registry: close: %w", ctx.Err())
		}
	}
	return r.repo.Close(ctx)
}

// pin returns the state of l's key, marking it in use so that it cannot be
// evicted until unpin. The state of a key whose state was evicted is made
// anew, with l as its handle: Obtain returns l again from then on.
func (r *Registry) pin(l *lockHandle) (*keyState, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, ErrClosed
	}
	k := r.active[l.key]
	if k == nil {
		if c, ok := r.idle.peek(l.key); ok {
			k = c
			r.idle.remove(c)
		} else {
			k = newKeyState(l)
		}
		r.active[l.key] = k
	}
	k.refs++
	return k, nil
}

// unpin ends one use of k; the last use moves it back to the idle cache.
func (r *Registry) unpin(k *keyState) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k.refs--
	if k.refs > 0 {
		return
	}
	delete(r.active, k.key)
	k.lastUsed = time.Now()
	r.idle.add(k)
}

// holder returns the state of key if it is in use.
func (r *Registry) holder(key string) *keyState {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.active[key]
}

// startBackground registers a background goroutine that Close waits for.
// It reports false once the registry is closed, because Close no longer
// waits for new goroutines; the caller then does the work synchronously,
// or not at all.
func (r *Registry) startBackground() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	r.background++
	return true
}

func (r *Registry) endBackground() {
	r.mu.Lock()
	r.background--
	if r.background == 0 && r.drained != nil {
		close(r.drained)
		r.drained = nil
	}
	r.mu.Unlock()
}

// report passes err, about key, to the error handler, or logs it.
func (r *Registry) report(key string, err error) {
	if h := r.opts.errorHandler; h != nil {
		h(key, err)
		return
	}
	if errors.Is(err, ErrTransient) {
		r.log.Repeated("transient", "lockreg: lock error", err, tel.LogKey, key)
		return
	}
	r.log.Error("lockreg: lock error", err, tel.LogKey, key)
}

// Logger returns the logger set with [WithLogger], or slog.Default() as it
// is now, for packages built on a registry that log beside it.
func (r *Registry) Logger() *slog.Logger { return r.log.Slog() }

// MeterProvider returns the provider set with [WithMeterProvider], nil if
// none, for packages built on a registry that record metrics beside it.
func (r *Registry) MeterProvider() metric.MeterProvider { return r.opts.meters }

// TracerProvider returns the provider set with [WithTracerProvider], nil
// if none.
func (r *Registry) TracerProvider() trace.TracerProvider { return r.opts.tracers }

// describe returns what repo says of itself.
func describe(repo Repository) Description {
	if d, ok := repo.(Describer); ok {
		if d := d.Describe(); d.Backend != "" {
			return d
		}
	}
	return Description{Backend: "other"}
}

// logFields are the fields of every record a registry on a repository
// described by d logs.
func logFields(d Description) []any {
	f := []any{tel.LogBackend, d.Backend}
	if d.Region != "" {
		f = append(f, tel.LogRegion, d.Region)
	}
	if d.Client != "" {
		f = append(f, tel.LogClient, d.Client)
	}
	return f
}

// localRepository grants every lease: the local per-key primitive alone
// provides exclusion. Its tokens increase across all keys.
type localRepository struct{ tokens atomic.Int64 }

func (r *localRepository) Acquire(context.Context, string, time.Duration) (Lease, bool, error) {
	return Lease{Token: r.tokens.Add(1)}, true, nil
}
func (*localRepository) Renew(context.Context, string, time.Duration) error { return nil }
func (*localRepository) Release(context.Context, string) error              { return nil }
func (*localRepository) Close(context.Context) error                        { return nil }
func (*localRepository) Describe() Description                              { return Description{Backend: "local"} }

package registry_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockreg/lockreg/registry"
	"github.com/lockreg/lockreg/registry/registrytest"
)

// hooked is a memory client whose calls a test can intercept: a hook that
// returns handled=false falls through to the memory client.
type hooked struct {
	registry.Repository
	acquire func(ctx context.Context) (handled bool, ok bool, err error)
	release func(ctx context.Context) (handled bool, err error)
	renew   func(ctx context.Context) (handled bool, err error)

	acquires, releases, renews atomic.Int32
}

func newHooked() (*hooked, *registrytest.Memory) {
	m := registrytest.NewMemory()
	return &hooked{Repository: m.NewClient()}, m
}

func (h *hooked) Acquire(ctx context.Context, key string, ttl time.Duration) (registry.Lease, bool, error) {
	h.acquires.Add(1)
	if h.acquire != nil {
		if handled, ok, err := h.acquire(ctx); handled {
			return registry.Lease{}, ok, err
		}
	}
	return h.Repository.Acquire(ctx, key, ttl)
}

func (h *hooked) Release(ctx context.Context, key string) error {
	h.releases.Add(1)
	if h.release != nil {
		if handled, err := h.release(ctx); handled {
			return err
		}
	}
	return h.Repository.Release(ctx, key)
}

func (h *hooked) Renew(ctx context.Context, key string, ttl time.Duration) error {
	h.renews.Add(1)
	if h.renew != nil {
		if handled, err := h.renew(ctx); handled {
			return err
		}
	}
	return h.Repository.Renew(ctx, key, ttl)
}

// failing returns a hook result that fails the first n calls transiently.
func failing(n int32) func() (bool, error) {
	var calls atomic.Int32
	return func() (bool, error) {
		if calls.Add(1) <= n {
			return true, registry.Transient(errors.New("injected"))
		}
		return false, nil
	}
}

func newReg(t *testing.T, repo registry.Repository, opts ...registry.Option) *registry.Registry {
	t.Helper()
	r, err := registry.New(repo, append([]registry.Option{registry.WithIdleBetweenTries(5 * time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(context.Background()) })
	return r
}

func wantPanic(t *testing.T, f func()) (v any) {
	t.Helper()
	defer func() {
		if v = recover(); v == nil {
			t.Fatal("did not panic")
		}
	}()
	f()
	return nil
}

func TestNewRejectsInvalidOptions(t *testing.T) {
	for name, opt := range map[string]registry.Option{
		"zero TTL":          registry.WithTTL(0),
		"negative idle":     registry.WithIdleBetweenTries(-time.Second),
		"zero capacity":     registry.WithCacheCapacity(0),
		"nil error handler": registry.WithErrorHandler(nil),
	} {
		t.Run(name, func(t *testing.T) {
			r, err := registry.NewLocal(opt)
			if !errors.Is(err, registry.ErrInvalidOption) || r != nil {
				t.Fatalf("NewLocal: got %v, %v; want nil and an error wrapping ErrInvalidOption", r, err)
			}
		})
	}
	t.Run("zero TTL is also ErrInvalidTTL", func(t *testing.T) {
		if _, err := registry.NewLocal(registry.WithTTL(0)); !errors.Is(err, registry.ErrInvalidTTL) {
			t.Fatalf("got %v, want an error wrapping ErrInvalidTTL", err)
		}
	})
	t.Run("nil repository", func(t *testing.T) {
		if r, err := registry.New(nil); !errors.Is(err, registry.ErrInvalidOption) || r != nil {
			t.Fatalf("New(nil): got %v, %v; want nil and an error wrapping ErrInvalidOption", r, err)
		}
	})
}

func TestLockPanicsWithNonTransientError(t *testing.T) {
	boom := errors.New("boom")
	repo, _ := newHooked()
	repo.acquire = func(context.Context) (bool, bool, error) { return true, false, boom }
	l := newReg(t, repo).Obtain("k")
	if err := l.LockContext(context.Background()); !errors.Is(err, boom) {
		t.Fatalf("LockContext: got %v, want it to wrap the repository's error", err)
	}
	v := wantPanic(t, l.Lock)
	if err, ok := v.(error); !ok || !errors.Is(err, boom) {
		t.Fatalf("Lock panicked with %v, want an error wrapping the repository's error", v)
	}
}

func TestTryLockPanicsWithNonTransientErrorButNotTransientOne(t *testing.T) {
	repo, _ := newHooked()
	var transient atomic.Bool
	repo.acquire = func(context.Context) (bool, bool, error) {
		if transient.Load() {
			return true, false, registry.Transient(errors.New("blip"))
		}
		return true, false, errors.New("boom")
	}
	var reported atomic.Int32
	l := newReg(t, repo, registry.WithErrorHandler(func(string, error) { reported.Add(1) })).Obtain("k")
	wantPanic(t, func() { l.TryLock() })
	transient.Store(true)
	if l.TryLock() {
		t.Fatal("TryLock succeeded on a transient error")
	}
	if reported.Load() != 1 {
		t.Fatalf("the transient error was reported %d times, want once", reported.Load())
	}
}

func TestLockPanicsOnClosedRegistry(t *testing.T) {
	r, err := registry.NewLocal()
	if err != nil {
		t.Fatal(err)
	}
	r.Close(context.Background())
	v := wantPanic(t, r.Obtain("k").Lock)
	if err, ok := v.(error); !ok || !errors.Is(err, registry.ErrClosed) {
		t.Fatalf("Lock panicked with %v, want registry.ErrClosed", v)
	}
}

func TestUnlockRetriesTransientReleaseErrors(t *testing.T) {
	repo, _ := newHooked()
	fail := failing(2)
	repo.release = func(context.Context) (bool, error) { return fail() }
	var reported atomic.Int32
	l := newReg(t, repo, registry.WithErrorHandler(func(string, error) { reported.Add(1) })).Obtain("k")
	l.Lock()
	if err := l.UnlockContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	if repo.releases.Load() != 3 || reported.Load() != 2 {
		t.Fatalf("%d releases and %d reports, want 3 and 2", repo.releases.Load(), reported.Load())
	}
}

func TestRenewRetriesTransientErrors(t *testing.T) {
	repo, _ := newHooked()
	fail := failing(2)
	repo.renew = func(context.Context) (bool, error) { return fail() }
	l := newReg(t, repo, registry.WithErrorHandler(func(string, error) {})).Obtain("k")
	l.Lock()
	defer l.Unlock()
	if err := l.Renew(context.Background()); err != nil {
		t.Fatal(err)
	}
	if repo.renews.Load() != 3 {
		t.Fatalf("%d renewals, want 3", repo.renews.Load())
	}
}

// A release that cannot get through before the lease runs out ends the
// hold by expiry: the unlock reports the lease lost (the guarded data may be
// another holder's now), with the error it gave up on.
func TestUnlockGivesUpOnceTheLeaseWouldHaveExpiredReportsItLostAndFreesTheKey(t *testing.T) {
	repo, _ := newHooked()
	var broken atomic.Bool
	repo.release = func(context.Context) (bool, error) {
		if broken.Load() {
			return true, registry.Transient(errors.New("database down"))
		}
		return false, nil
	}
	l := newReg(t, repo, registry.WithTTL(100*time.Millisecond), registry.WithErrorHandler(func(string, error) {})).Obtain("k")
	l.Lock()
	broken.Store(true)
	if err := l.UnlockContext(context.Background()); !errors.Is(err, registry.ErrLockLost) || !errors.Is(err, registry.ErrTransient) {
		t.Fatalf("got %v, want ErrLockLost with the transient error it gave up on", err)
	}
	broken.Store(false)
	if !l.TryLock() {
		t.Fatal("the key stayed locked locally after Unlock gave up")
	}
	l.Unlock()
}

func TestSlowAttemptTimesOutAfterTTLAndIsRetried(t *testing.T) {
	repo, _ := newHooked()
	var first atomic.Bool
	first.Store(true)
	repo.acquire = func(ctx context.Context) (bool, bool, error) {
		if first.CompareAndSwap(true, false) {
			<-ctx.Done() // a statement stuck on a dead connection
			return true, false, ctx.Err()
		}
		return false, false, nil
	}
	var transient atomic.Int32
	l := newReg(t, repo, registry.WithTTL(50*time.Millisecond), registry.WithErrorHandler(func(_ string, err error) {
		if errors.Is(err, registry.ErrTransient) {
			transient.Add(1)
		}
	})).Obtain("k")
	if err := l.LockContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	l.Unlock()
	if transient.Load() == 0 {
		t.Fatal("the attempt that timed out was not reported as transient")
	}
}

// An attempt abandoned by its caller may still commit at the server; its
// lease is released before anyone in this process can take the key again.
// A TryLock meanwhile is no "held elsewhere": it waits for the release, then
// takes the key.
func TestAbandonedAttemptIsReleasedBeforeTheKeyIsTakenAgainLocally(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		repo, m := newHooked()
		var first, released, early atomic.Bool
		first.Store(true)
		repo.acquire = func(ctx context.Context) (bool, bool, error) {
			if first.CompareAndSwap(true, false) {
				<-ctx.Done()
				// The statement committed although the caller gave up.
				_, ok, err := repo.Repository.Acquire(context.Background(), "k", time.Minute)
				if !ok || err != nil {
					panic("setup")
				}
				return true, false, ctx.Err()
			}
			if !released.Load() {
				early.Store(true)
			}
			return false, false, nil
		}
		releasing := make(chan struct{})
		proceed := make(chan struct{})
		var once sync.Once
		repo.release = func(ctx context.Context) (bool, error) {
			once.Do(func() { close(releasing); <-proceed })
			err := repo.Repository.Release(ctx, "k")
			released.Store(true)
			return true, err
		}
		r, err := registry.New(repo, registry.WithIdleBetweenTries(5*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		l := r.Obtain("k")
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
		defer cancel()
		if ok, err := l.TryLockContext(ctx); ok || err != nil {
			t.Fatalf("TryLockContext = %v, %v; want false, nil at the deadline", ok, err)
		}
		<-releasing
		took := make(chan bool, 1)
		go func() { took <- l.TryLock() }()
		synctest.Wait() // TryLock returned, or waits for the release
		close(proceed)
		if !<-took {
			t.Fatal("TryLock failed while only the release of an abandoned attempt kept the key")
		}
		if early.Load() {
			t.Fatal("the key was taken again before the abandoned lease was released")
		}
		l.Unlock()
		if err := r.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		other := m.NewClient()
		if _, ok, _ := other.Acquire(context.Background(), "k", time.Minute); !ok {
			t.Fatal("a lease of the registry was not released")
		}
	})
}

func TestUnlockFromAnotherGoroutine(t *testing.T) {
	r, err := registry.NewLocal()
	if err != nil {
		t.Fatal(err)
	}
	l := r.Obtain("k")
	l.Lock()
	done := make(chan struct{})
	go func() { l.Unlock(); close(done) }()
	<-done
	if !l.TryLock() {
		t.Fatal("unlock from another goroutine did not release the lock")
	}
}

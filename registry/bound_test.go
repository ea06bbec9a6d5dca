package registry_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockreg/lockreg/registry"
)

// checkBound fails the test unless ctx, that of a statement sent now by a
// caller without a deadline, has a deadline within the TTL and not more than
// a sixteenth of it sooner: the statement is bounded as a lease of ttl is.
func checkBound(t *testing.T, what string, ctx context.Context, ttl time.Duration) {
	t.Helper()
	d, ok := ctx.Deadline()
	now := time.Now()
	switch {
	case !ok:
		t.Errorf("%s: statement without a deadline", what)
	case d.After(now.Add(ttl)):
		t.Errorf("%s: deadline %v after now, more than the TTL %v", what, d.Sub(now), ttl)
	case d.Before(now.Add(ttl - ttl/16)):
		t.Errorf("%s: deadline %v after now, less than 15/16 of the TTL %v", what, d.Sub(now), ttl)
	}
}

type valueKey struct{}

// Every statement of a caller whose context has no deadline (Lock, Unlock,
// Renew with context.Background, or a context with values only) is bounded
// by the TTL, however far apart the calls are, and sees the caller's values.
func TestStatementsOfCallersWithoutADeadlineAreBoundedByTheTTLAndSeeTheirValues(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = 800 * time.Millisecond
		repo, _ := newHooked()
		var want atomic.Int64 // the value the current caller's context carries, 0 if none
		check := func(what string, ctx context.Context) {
			checkBound(t, what, ctx, ttl)
			got, _ := ctx.Value(valueKey{}).(int64)
			if got != want.Load() {
				t.Errorf("%s: value %v, want %v", what, got, want.Load())
			}
		}
		repo.acquire = func(ctx context.Context) (bool, bool, error) { check("acquire", ctx); return false, false, nil }
		repo.release = func(ctx context.Context) (bool, error) { check("release", ctx); return false, nil }
		repo.renew = func(ctx context.Context) (bool, error) { check("renew", ctx); return false, nil }
		l := newReg(t, repo, registry.WithTTL(ttl)).Obtain("k")
		for i, gap := range []time.Duration{0, ttl / 100, ttl / 17, ttl / 16, ttl / 3, ttl, 3 * ttl} {
			time.Sleep(gap)
			ctx := context.Background()
			want.Store(0)
			if i%2 == 1 {
				ctx = context.WithValue(ctx, valueKey{}, int64(i))
				want.Store(int64(i))
			}
			if err := l.LockContext(ctx); err != nil {
				t.Fatal(err)
			}
			held := min(gap, ttl/3) // within the safety margin
			time.Sleep(held / 2)
			if err := l.Renew(ctx); err != nil {
				t.Fatal(err)
			}
			time.Sleep(held / 3)
			if err := l.UnlockContext(ctx); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// A release stuck on a dead connection, from an Unlock whose context has
// values but no deadline, is cut at the TTL, also through a context the
// repository derives from the statement's (as database/sql does), and
// reported as a transient error that outlived the lease.
func TestSlowReleaseOfAnUnlockWithoutDeadlineIsCutAtTheTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = time.Second
		repo, _ := newHooked()
		var first atomic.Bool
		first.Store(true)
		repo.release = func(ctx context.Context) (bool, error) {
			if first.CompareAndSwap(true, false) {
				derived, cancel := context.WithCancel(ctx)
				defer cancel()
				<-derived.Done()
				return true, derived.Err()
			}
			return false, nil
		}
		var transient atomic.Int32
		l := newReg(t, repo, registry.WithTTL(ttl), registry.WithErrorHandler(func(_ string, err error) {
			if errors.Is(err, registry.ErrTransient) {
				transient.Add(1)
			}
		})).Obtain("k")
		l.Lock()
		time.Sleep(ttl / 2)
		if err := l.Renew(context.Background()); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		err := l.UnlockContext(context.WithValue(context.Background(), valueKey{}, 1))
		if err == nil {
			t.Fatal("the release cut at the lease's expiry reported no loss")
		}
		if !errors.Is(err, registry.ErrLockLost) || !errors.Is(err, registry.ErrTransient) {
			t.Fatalf("got %v, want ErrLockLost with the transient error it gave up on", err)
		}
		if elapsed := time.Since(start); elapsed > ttl {
			t.Fatalf("the release took %v, longer than the TTL %v", elapsed, ttl)
		}
		if repo.releases.Load() != 1 {
			t.Fatalf("%d release calls, want 1: the lease expired before a retry", repo.releases.Load())
		}
	})
}

// A hold's Done closes at its own safety margin, also when an earlier hold
// of the same key armed the watchdog for an earlier deadline and was
// unlocked meanwhile.
func TestDoneOfALaterHoldOfTheKeyClosesAtItsOwnSafetyMargin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = time.Second // safety margin 200 ms before expiry
		repo, _ := newHooked()
		l := newReg(t, repo, registry.WithTTL(ttl)).Obtain("k")
		l.Lock()
		time.Sleep(100 * time.Millisecond)
		l.Unlock()
		time.Sleep(400 * time.Millisecond)
		l.Lock() // deadline at 500 + 800 ms; the first hold's was at 800 ms
		done := l.Done()
		time.Sleep(500 * time.Millisecond) // past the first hold's deadline
		synctest.Wait()
		select {
		case <-done:
			t.Fatal("Done closed at the safety margin of the key's earlier hold")
		default:
		}
		time.Sleep(350 * time.Millisecond) // past its own
		synctest.Wait()
		select {
		case <-done:
		default:
			t.Fatal("Done still open after its hold's safety margin")
		}
		l.Unlock()
	})
}

// A renewal that finds the lease lost closes Done, and the key's next hold
// gets a Done that is open and closes at its own safety margin.
func TestDoneClosesWhenARenewalFindsTheLeaseLostAndTheNextHoldGetsAnOpenOne(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = time.Second
		repo, _ := newHooked()
		var lost atomic.Bool
		repo.renew = func(context.Context) (bool, error) {
			if lost.Load() {
				return true, registry.ErrLockLost
			}
			return false, nil
		}
		l := newReg(t, repo, registry.WithTTL(ttl)).Obtain("k")
		l.Lock()
		lost.Store(true)
		if err := l.Renew(context.Background()); !errors.Is(err, registry.ErrLockLost) {
			t.Fatalf("Renew: %v, want ErrLockLost", err)
		}
		select {
		case <-l.Done():
		default:
			t.Fatal("Done open after a renewal found the lease lost")
		}
		l.Unlock()
		l.Lock()
		done := l.Done()
		synctest.Wait()
		select {
		case <-done:
			t.Fatal("the next hold's Done closed at once")
		default:
		}
		time.Sleep(ttl - ttl/5 + time.Millisecond)
		synctest.Wait()
		select {
		case <-done:
		default:
			t.Fatal("the next hold's Done still open after its safety margin")
		}
		l.Unlock()
	})
}

// shortLease hands out leases that last less than the safety margin, as a
// lease handed over near its end does.
type shortLease struct {
	registry.Repository
	remaining time.Duration
}

func (s shortLease) Acquire(ctx context.Context, key string, ttl time.Duration) (registry.Lease, bool, error) {
	lease, ok, err := s.Repository.Acquire(ctx, key, ttl)
	lease.TTL = s.remaining
	return lease, ok, err
}

// A lease that comes back with less than the safety margin left closes Done
// at once: the watchdog, firing as it is armed, finds the new hold.
func TestDoneOfALeaseShorterThanTheSafetyMarginClosesAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		repo, _ := newHooked()
		l := newReg(t, shortLease{Repository: repo, remaining: time.Millisecond}, registry.WithTTL(time.Second)).Obtain("k")
		l.Lock()
		synctest.Wait()
		select {
		case <-l.Done():
		default:
			t.Fatal("Done open though the lease had less than its safety margin left")
		}
		l.Unlock()
	})
}

// A non-transient error of a call with a TTL of its own (whose statements
// get a bound of their own, not the registry's shared one) is returned at
// once, not retried as if the bound had cut the statement.
func TestNonTransientErrorsOfCallsWithTheirOwnTTLAreReturnedNotRetried(t *testing.T) {
	repo, _ := newHooked()
	denied := errors.New("permission denied")
	var failAcquire, failRenew, failRelease atomic.Bool
	repo.acquire = func(context.Context) (bool, bool, error) { return failAcquire.Load(), false, denied }
	repo.renew = func(context.Context) (bool, error) { return failRenew.Load(), denied }
	repo.release = func(context.Context) (bool, error) { return failRelease.Load(), denied }
	l := newReg(t, repo, registry.WithErrorHandler(func(string, error) {})).Obtain("k")
	const ttl = 2 * time.Second // not the registry's
	failAcquire.Store(true)
	if err := l.LockTTL(context.Background(), ttl); !errors.Is(err, denied) || errors.Is(err, registry.ErrTransient) {
		t.Fatalf("LockTTL: %v, want the error as it is", err)
	}
	if n := repo.acquires.Load(); n != 1 {
		t.Fatalf("%d acquire calls, want 1", n)
	}
	failAcquire.Store(false)
	if err := l.LockTTL(context.Background(), ttl); err != nil {
		t.Fatal(err)
	}
	failRenew.Store(true)
	if err := l.Renew(context.Background()); !errors.Is(err, denied) || errors.Is(err, registry.ErrTransient) {
		t.Fatalf("Renew: %v, want the error as it is", err)
	}
	if n := repo.renews.Load(); n != 1 {
		t.Fatalf("%d renew calls, want 1", n)
	}
	failRelease.Store(true)
	if err := l.UnlockContext(context.Background()); !errors.Is(err, denied) || errors.Is(err, registry.ErrTransient) {
		t.Fatalf("UnlockContext: %v, want the error as it is", err)
	}
	if n := repo.releases.Load(); n != 1 {
		t.Fatalf("%d release calls, want 1", n)
	}
}

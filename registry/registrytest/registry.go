package registrytest

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockreg/lockreg/registry"
)

// runRegistry checks locks over the backend, after Spring's
// JdbcLockRegistryTests and JdbcLockRegistryDifferentClientTests.
func runRegistry(t *testing.T, b Backend) {
	for _, tc := range []struct {
		name string
		test func(*testing.T, Backend)
	}{
		{"LockAndUnlockRepeatedly", testLockUnlockRepeatedly},
		{"MutualExclusionAcrossTwentyRegistries", testMutualExclusion},
		{"WaiterInAnotherRegistryAcquiresOnlyAfterRelease", testWaiterAfterRelease},
		{"ExpiredLockIsTakenOverAndOldOwnerLearnsItWasLost", testTakeoverLost},
		{"UnlockOfLostLeaseReportsToErrorHandler", testUnlockLostReports},
		{"RenewKeepsAnotherRegistryOut", testRenewKeepsOut},
		{"LockTTLOverridesRegistryTTL", testLockTTL},
		{"TryLockTTLOverridesRegistryTTL", testTryLockTTL},
		{"TryLockFailsWhileAnotherRegistryHolds", testTryLockHeldElsewhere},
		{"TryLockContextWithDeadlineReturnsByDeadline", testTryLockDeadline},
		{"TryLockContextWithoutDeadlineMakesOneAttempt", testTryLockOneAttempt},
		{"TransientErrorsAreRetried", testTransientRetried},
		{"LocalWaitersDoNotTouchRepository", testLocalWaitersQuiet},
		{"OneGoroutinePerKeyPolls", testOnePoller},
		{"LockIsNotReentrant", testNotReentrant},
		{"UnlockOfUnheldLockPanics", testUnlockUnheldPanics},
		{"UnlockContextOfUnheldLockIsErrNotHeld", testUnlockContextUnheld},
		{"RenewOfUnheldLockIsErrNotHeld", testRenewUnheld},
		{"NonPositiveTTLIsRejected", testBadTTL},
		{"CanceledWaitReturnsContextError", testCanceledWait},
		{"CloseWakesWaitersWithErrClosed", testCloseWakes},
		{"HeldLockCanBeUnlockedAfterClose", testUnlockAfterClose},
		{"MissingStorageIsAnErrorAndLockPanics", testMissingStorage},
		{"TryLockAfterFailedLockReturnsTheErrorAgain", testTryLockAfterFailedLock},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.test(t, b) })
	}
}

func testLockUnlockRepeatedly(t *testing.T, b Backend) {
	r := newRegistry(t, b)
	l := r.Obtain(key(t))
	for range 10 {
		must(t, l.LockContext(ctxT(t)))
		must(t, l.UnlockContext(ctxT(t)))
	}
	if r.Obtain(key(t)) != l {
		t.Fatal("Obtain returned a different object for a cached key")
	}
}

func testMutualExclusion(t *testing.T, b Backend) {
	distributed(t, b)
	const n, rounds = 20, 3
	var inside, entries, violations atomic.Int32
	var wg sync.WaitGroup
	for range n {
		r := newRegistry(t, b)
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := r.Obtain(key(t))
			for range rounds {
				if err := l.LockContext(ctxT(t)); err != nil {
					t.Error(err)
					return
				}
				if inside.Add(1) != 1 {
					violations.Add(1)
				}
				entries.Add(1)
				time.Sleep(time.Millisecond)
				inside.Add(-1)
				if err := l.UnlockContext(ctxT(t)); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	if v := violations.Load(); v != 0 {
		t.Fatalf("%d times two registries were inside the critical section together", v)
	}
	if e := entries.Load(); e != n*rounds {
		t.Fatalf("%d critical sections ran, want %d", e, n*rounds)
	}
}

func testWaiterAfterRelease(t *testing.T, b Backend) {
	distributed(t, b)
	r1, r2 := newRegistry(t, b), newRegistry(t, b)
	var (
		mu    sync.Mutex
		order []int
	)
	add := func(i int) { mu.Lock(); order = append(order, i); mu.Unlock() }
	l1 := r1.Obtain(key(t))
	must(t, l1.LockContext(ctxT(t)))
	done := make(chan error)
	go func() {
		l2 := r2.Obtain(key(t))
		if err := l2.LockContext(ctxT(t)); err != nil {
			done <- err
			return
		}
		add(4)
		done <- l2.UnlockContext(ctxT(t))
	}()
	for i := 1; i <= 3; i++ {
		add(i)
		time.Sleep(3 * short) // give the waiter every chance to barge in
	}
	must(t, l1.UnlockContext(ctxT(t)))
	must(t, <-done)
	if want := []int{1, 2, 3, 4}; !slices.Equal(order, want) {
		t.Fatalf("critical sections ran in order %v, want %v", order, want)
	}
}

func testTakeoverLost(t *testing.T, b Backend) {
	distributed(t, b)
	r1, r2 := newRegistry(t, b, registry.WithTTL(ttl)), newRegistry(t, b)
	l1 := r1.Obtain(key(t))
	must(t, l1.LockContext(ctxT(t)))
	time.Sleep(past)
	l2 := r2.Obtain(key(t))
	must(t, l2.LockContext(ctxT(t)))
	wantLost(t, l1.UnlockContext(ctxT(t)))
	if err := l1.UnlockContext(ctxT(t)); !errors.Is(err, registry.ErrNotHeld) {
		t.Fatalf("after a lost unlock the lock should be released locally; second unlock: %v", err)
	}
	must(t, l2.UnlockContext(ctxT(t)))
}

func testUnlockLostReports(t *testing.T, b Backend) {
	distributed(t, b)
	var log errorLog
	r1 := newRegistry(t, b, registry.WithTTL(ttl), registry.WithErrorHandler(log.handle))
	r2 := newRegistry(t, b)
	l1 := r1.Obtain(key(t))
	l1.Lock()
	time.Sleep(past)
	must(t, r2.Obtain(key(t)).LockContext(ctxT(t)))
	l1.Unlock() // must not panic
	errs := log.all()
	if len(errs) != 1 || !errors.Is(errs[0], registry.ErrLockLost) {
		t.Fatalf("error handler got %v, want one error wrapping registry.ErrLockLost", errs)
	}
	if err := l1.UnlockContext(ctxT(t)); !errors.Is(err, registry.ErrNotHeld) {
		t.Fatalf("Unlock of a lost lease did not release it locally; second unlock: %v", err)
	}
}

func testRenewKeepsOut(t *testing.T, b Backend) {
	distributed(t, b)
	r1, r2 := newRegistry(t, b, registry.WithTTL(ttl)), newRegistry(t, b)
	l1 := r1.Obtain(key(t))
	must(t, l1.LockContext(ctxT(t)))
	for range 4 {
		time.Sleep(ttl / 3)
		must(t, l1.Renew(ctxT(t)))
	}
	if r2.Obtain(key(t)).TryLock() {
		t.Fatal("another registry took a lease that was being renewed")
	}
	must(t, l1.RenewTTL(ctxT(t), time.Minute))
	time.Sleep(past)
	if r2.Obtain(key(t)).TryLock() {
		t.Fatal("another registry took a lease renewed with a longer TTL")
	}
	must(t, l1.UnlockContext(ctxT(t)))
}

func testLockTTL(t *testing.T, b Backend) {
	distributed(t, b)
	r1, r2 := newRegistry(t, b, registry.WithTTL(ttl)), newRegistry(t, b)
	l1 := r1.Obtain(key(t))
	must(t, l1.LockTTL(ctxT(t), time.Minute))
	time.Sleep(past)
	if r2.Obtain(key(t)).TryLock() {
		t.Fatal("the registry TTL applied instead of the lock's")
	}
	must(t, l1.UnlockContext(ctxT(t)))
}

func testTryLockTTL(t *testing.T, b Backend) {
	distributed(t, b)
	r1, r2 := newRegistry(t, b, registry.WithTTL(ttl)), newRegistry(t, b)
	l1 := r1.Obtain(key(t))
	ctx, cancel := context.WithTimeout(ctxT(t), 5*time.Second)
	defer cancel()
	ok, err := l1.TryLockTTL(ctx, time.Minute)
	must(t, err)
	if !ok {
		t.Fatal("TryLockTTL on a free key failed")
	}
	time.Sleep(past)
	if r2.Obtain(key(t)).TryLock() {
		t.Fatal("the registry TTL applied instead of the lock's")
	}
	must(t, l1.UnlockContext(ctxT(t)))
}

func testTryLockHeldElsewhere(t *testing.T, b Backend) {
	distributed(t, b)
	r1, r2 := newRegistry(t, b), newRegistry(t, b)
	l1, l2 := r1.Obtain(key(t)), r2.Obtain(key(t))
	must(t, l1.LockContext(ctxT(t)))
	if l2.TryLock() {
		t.Fatal("TryLock succeeded while another registry held the lock")
	}
	ctx, cancel := context.WithTimeout(ctxT(t), 5*short)
	defer cancel()
	ok, err := l2.TryLockContext(ctx)
	if ok || err != nil {
		t.Fatalf("TryLockContext with a deadline while held elsewhere = %v, %v; want false, nil", ok, err)
	}
	must(t, l1.UnlockContext(ctxT(t)))
	// Waits for the key locally too: a TryLockContext abandoned at its
	// deadline mid-statement keeps the key for one more round trip while it
	// releases what the statement may have taken.
	ok, err = l2.TryLockContext(ctxT(t))
	if !ok || err != nil {
		t.Fatalf("TryLockContext after the other registry unlocked = %v, %v", ok, err)
	}
	l2.Unlock()
}

func testTryLockDeadline(t *testing.T, b Backend) {
	distributed(t, b)
	// With a long idle interval, a wait that overshot its deadline by one
	// interval (Spring's behaviour) would return 10 s late.
	const idle = 10 * time.Second
	r1 := newRegistry(t, b)
	r2 := newRegistry(t, b, registry.WithIdleBetweenTries(idle))
	must(t, r1.Obtain(key(t)).LockContext(ctxT(t)))
	deadline := time.Now().Add(5 * short)
	ctx, cancel := context.WithDeadline(ctxT(t), deadline)
	defer cancel()
	ok, err := r2.Obtain(key(t)).TryLockContext(ctx)
	returned := time.Now()
	if ok || err != nil {
		t.Fatalf("TryLockContext = %v, %v; want false, nil", ok, err)
	}
	if late := returned.Sub(deadline); late > idle/2 {
		t.Fatalf("TryLockContext returned %v after its deadline, as if it slept a whole idle interval", late)
	}
}

func testTryLockOneAttempt(t *testing.T, b Backend) {
	distributed(t, b)
	r1 := newRegistry(t, b)
	repo := wrapped(t, b)
	r2 := newRegistryOn(t, repo)
	must(t, r1.Obtain(key(t)).LockContext(ctxT(t)))
	ok, err := r2.Obtain(key(t)).TryLockContext(context.Background())
	if ok || err != nil {
		t.Fatalf("TryLockContext without deadline = %v, %v; want false, nil", ok, err)
	}
	if n := repo.acquires.Load(); n != 1 {
		t.Fatalf("TryLockContext without deadline asked the repository %d times, want once", n)
	}
}

func testTransientRetried(t *testing.T, b Backend) {
	var log errorLog
	repo := wrapped(t, b)
	repo.failAcquires.Store(3)
	r := newRegistryOn(t, repo, registry.WithErrorHandler(log.handle))
	l := r.Obtain(key(t))
	must(t, l.LockContext(ctxT(t)))
	must(t, l.UnlockContext(ctxT(t)))
	if n := repo.acquires.Load(); n != 4 {
		t.Fatalf("the repository was asked %d times, want 3 failures and 1 success", n)
	}
	errs := log.all()
	if len(errs) != 3 || !errors.Is(errs[0], registry.ErrTransient) {
		t.Fatalf("error handler got %v, want the 3 transient errors", errs)
	}
}

func testLocalWaitersQuiet(t *testing.T, b Backend) {
	repo := wrapped(t, b)
	r := newRegistryOn(t, repo)
	l := r.Obtain(key(t))
	must(t, l.LockContext(ctxT(t)))
	before := repo.acquires.Load()
	var wg sync.WaitGroup
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := r.Obtain(key(t))
			if err := l.LockContext(ctxT(t)); err != nil {
				t.Error(err)
				return
			}
			must(t, l.UnlockContext(ctxT(t)))
		}()
	}
	time.Sleep(10 * short)
	if n := repo.acquires.Load() - before; n != 0 {
		t.Fatalf("local waiters asked the repository %d times while the lock was held in-process", n)
	}
	must(t, l.UnlockContext(ctxT(t)))
	wg.Wait()
	if n := repo.acquires.Load() - before; n != 10 {
		t.Fatalf("10 local hand-offs took %d repository acquisitions, want 10", n)
	}
}

func testOnePoller(t *testing.T, b Backend) {
	distributed(t, b)
	r1 := newRegistry(t, b)
	repo := wrapped(t, b)
	r2 := newRegistryOn(t, repo)
	must(t, r1.Obtain(key(t)).LockContext(ctxT(t)))
	ctx, cancel := context.WithCancel(ctxT(t))
	var wg sync.WaitGroup
	start := time.Now()
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r2.Obtain(key(t)).LockContext(ctx); !errors.Is(err, context.Canceled) {
				t.Errorf("waiter: got %v, want context.Canceled", err)
			}
		}()
	}
	time.Sleep(20 * short)
	cancel()
	wg.Wait()
	elapsed := time.Since(start)
	if m := repo.maxInflight.Load(); m != 1 {
		t.Fatalf("%d waiters of one process polled the repository at once, want 1", m)
	}
	// One poller sleeps an idle interval between attempts; ten would make
	// about ten times as many.
	if n, most := repo.acquires.Load(), int64(elapsed/short)+2; n > most {
		t.Fatalf("%d acquisitions in %v with idle %v: more than one poller", n, elapsed, short)
	}
}

func testNotReentrant(t *testing.T, b Backend) {
	r := newRegistry(t, b)
	l := r.Obtain(key(t))
	must(t, l.LockContext(ctxT(t)))
	ctx, cancel := context.WithTimeout(ctxT(t), 5*short)
	defer cancel()
	if err := l.LockContext(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("re-locking a held lock: got %v, want to wait until the deadline", err)
	}
	if l.TryLock() {
		t.Fatal("TryLock of a lock held by the same goroutine succeeded")
	}
	must(t, l.UnlockContext(ctxT(t)))
}

func testUnlockUnheldPanics(t *testing.T, b Backend) {
	r := newRegistry(t, b)
	defer func() {
		if recover() == nil {
			t.Fatal("Unlock of an unheld lock did not panic")
		}
	}()
	r.Obtain(key(t)).Unlock()
}

func testUnlockContextUnheld(t *testing.T, b Backend) {
	r := newRegistry(t, b)
	if err := r.Obtain(key(t)).UnlockContext(ctxT(t)); !errors.Is(err, registry.ErrNotHeld) {
		t.Fatalf("got %v, want registry.ErrNotHeld", err)
	}
}

func testRenewUnheld(t *testing.T, b Backend) {
	r := newRegistry(t, b)
	if err := r.Obtain(key(t)).Renew(ctxT(t)); !errors.Is(err, registry.ErrNotHeld) {
		t.Fatalf("got %v, want registry.ErrNotHeld", err)
	}
}

func testBadTTL(t *testing.T, b Backend) {
	r := newRegistry(t, b)
	l := r.Obtain(key(t))
	if err := l.LockTTL(ctxT(t), 0); !errors.Is(err, registry.ErrInvalidTTL) {
		t.Fatalf("LockTTL(0): got %v, want registry.ErrInvalidTTL", err)
	}
	if _, err := l.TryLockTTL(ctxT(t), -time.Second); !errors.Is(err, registry.ErrInvalidTTL) {
		t.Fatalf("TryLockTTL(-1s): got %v, want registry.ErrInvalidTTL", err)
	}
	must(t, l.LockContext(ctxT(t)))
	if err := l.RenewTTL(ctxT(t), 0); !errors.Is(err, registry.ErrInvalidTTL) {
		t.Fatalf("RenewTTL(0): got %v, want registry.ErrInvalidTTL", err)
	}
	must(t, l.UnlockContext(ctxT(t)))
}

func testCanceledWait(t *testing.T, b Backend) {
	distributed(t, b)
	r1, r2 := newRegistry(t, b), newRegistry(t, b)
	must(t, r1.Obtain(key(t)).LockContext(ctxT(t)))
	ctx, cancel := context.WithCancel(ctxT(t))
	go func() { time.Sleep(5 * short); cancel() }()
	if err := r2.Obtain(key(t)).LockContext(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	if ok, err := r2.Obtain(key(t)).TryLockContext(ctx); ok || !errors.Is(err, context.Canceled) {
		t.Fatalf("TryLockContext on a canceled context = %v, %v; want false, context.Canceled", ok, err)
	}
}

func testCloseWakes(t *testing.T, b Backend) {
	r := newRegistry(t, b)
	l := r.Obtain(key(t))
	must(t, l.LockContext(ctxT(t)))
	done := make(chan error)
	go func() { done <- r.Obtain(key(t)).LockContext(ctxT(t)) }()
	time.Sleep(5 * short)
	must(t, r.Close(ctxT(t)))
	if err := <-done; !errors.Is(err, registry.ErrClosed) {
		t.Fatalf("waiter: got %v, want registry.ErrClosed", err)
	}
	if err := r.Obtain(key(t, "other")).LockContext(ctxT(t)); !errors.Is(err, registry.ErrClosed) {
		t.Fatalf("lock after Close: got %v, want registry.ErrClosed", err)
	}
	must(t, l.UnlockContext(ctxT(t)))
}

func testUnlockAfterClose(t *testing.T, b Backend) {
	r := newRegistry(t, b)
	l := r.Obtain(key(t))
	must(t, l.LockContext(ctxT(t)))
	must(t, r.Close(ctxT(t)))
	must(t, l.UnlockContext(ctxT(t)))
	if b.NewRepository != nil {
		r2 := newRegistry(t, b)
		if !r2.Obtain(key(t)).TryLock() {
			t.Fatal("a lock unlocked after Close was not released")
		}
	}
}

func testMissingStorage(t *testing.T, b Backend) {
	if b.NewMissingStorage == nil {
		t.Skip("requires Backend.NewMissingStorage, which this backend does not provide")
	}
	r, err := registry.New(b.NewMissingStorage(t), registry.WithIdleBetweenTries(short))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background()) // its error is the missing storage again
	l := r.Obtain(key(t))
	err = l.LockContext(ctxT(t))
	if err == nil || errors.Is(err, registry.ErrTransient) {
		t.Fatalf("LockContext on missing storage: got %v, want a non-transient error", err)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("Lock on missing storage did not panic")
		}
	}()
	l.Lock()
}

// A LockContext that failed may tidy up in the background (leave the key's
// queue, say); the next TryLockContext still asks the repository and
// returns its error, rather than reporting the key held.
func testTryLockAfterFailedLock(t *testing.T, b Backend) {
	if b.NewMissingStorage == nil {
		t.Skip("requires Backend.NewMissingStorage, which this backend does not provide")
	}
	r, err := registry.New(b.NewMissingStorage(t), registry.WithIdleBetweenTries(short),
		registry.WithErrorHandler(func(string, error) {}))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background()) // its error is the missing storage again
	l := r.Obtain(key(t))
	if err := l.LockContext(ctxT(t)); err == nil {
		t.Fatal("LockContext on missing storage succeeded")
	}
	ok, err := l.TryLockContext(context.Background())
	if ok || err == nil || errors.Is(err, registry.ErrTransient) {
		t.Fatalf("TryLockContext right after a failed LockContext = %v, %v; want false and the storage's error", ok, err)
	}
}

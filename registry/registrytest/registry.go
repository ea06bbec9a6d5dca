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
		{"CheckPassesOnWorkingStorageAndFailsAfterClose", testCheck},
		{"CheckOfMissingStorageFails", testCheckMissingStorage},
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
	// One hang guard for the whole run, not a deadline per call: without a
	// listener each hand-off waits for the next holder's poll, and a
	// waiter's turn comes after up to n-1 of them, which on loaded cores
	// took longer than ctxT's 30 s (CI).
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var inside, entries, violations atomic.Int32
	var wg sync.WaitGroup
	for range n {
		r := newRegistry(t, b)
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := r.Obtain(key(t))
			for range rounds {
				if err := l.LockContext(ctx); err != nil {
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
	r1, r2 := newRegistry(t, b, registry.WithTTL(renewTTL)), newRegistry(t, b)
	l1 := r1.Obtain(key(t))
	must(t, l1.LockContext(ctxT(t)))
	// Renew often until the first lease would have ended a third of the
	// TTL ago: each renewal then has most of the Done deadline (0.8 of the
	// TTL) to return, which a loaded machine needs, and the sleeps do not
	// eat into it.
	for start := time.Now(); time.Since(start) < renewTTL*4/3; {
		time.Sleep(renewTTL / 10)
		must(t, l1.Renew(ctxT(t)))
	}
	if r2.Obtain(key(t)).TryLock() {
		t.Fatal("another registry took a lease that was being renewed")
	}
	must(t, l1.RenewTTL(ctxT(t), time.Minute))
	time.Sleep(2 * renewTTL)
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

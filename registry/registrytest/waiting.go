package registrytest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/lockreg/lockreg/registry"
)

// The checks of runRegistry for how locks are waited for: TryLock's
// attempts and deadlines, retries, and how many goroutines of a process
// ask the repository.

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

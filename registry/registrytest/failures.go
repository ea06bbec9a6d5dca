package registrytest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockreg/lockreg/registry"
)

// The checks of runRegistry for misuse (reentrance, unlocking what is not
// held, invalid TTLs), for waits that end without the lock (cancellation,
// Close) and for storage that fails.

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

func testCheck(t *testing.T, b Backend) {
	r := newRegistry(t, b)
	must(t, r.Check(ctxT(t)))
	must(t, r.Close(ctxT(t)))
	if err := r.Check(ctxT(t)); !errors.Is(err, registry.ErrClosed) {
		t.Fatalf("Check after Close: got %v, want an error wrapping registry.ErrClosed", err)
	}
}

// A repository that can check itself (registry.Checker) reports storage
// that does not exist; one that cannot passes.
func testCheckMissingStorage(t *testing.T, b Backend) {
	if b.NewMissingStorage == nil {
		t.Skip("requires Backend.NewMissingStorage, which this backend does not provide")
	}
	repo := b.NewMissingStorage(t)
	if _, ok := repo.(registry.Checker); !ok {
		t.Skipf("requires a registry.Checker; %T is none", repo)
	}
	r, err := registry.New(repo)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background()) // its error is the missing storage again
	if err := r.Check(ctxT(t)); err == nil {
		t.Fatal("Check on missing storage: got nil, want an error")
	}
}

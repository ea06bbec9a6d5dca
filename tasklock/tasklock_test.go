package tasklock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/lockreg/lockreg/registry"
	"github.com/lockreg/lockreg/tasklock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newLocal(t *testing.T, opts ...registry.Option) *tasklock.Executor {
	t.Helper()
	e, err := tasklock.NewLocal(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return e
}

func TestRunReportsRanAndTaskError(t *testing.T) {
	e := newLocal(t)
	boom := errors.New("boom")
	ran, err := e.Run(context.Background(), "job", func(ctx context.Context) error {
		if err := tasklock.AssertLocked(ctx); err != nil {
			t.Errorf("AssertLocked inside the task: %v", err)
		}
		return boom
	})
	if !ran || !errors.Is(err, boom) {
		t.Fatalf("Run = %v, %v; want true, boom", ran, err)
	}
	// Released: runs again.
	if ran, err := e.Run(context.Background(), "job", func(context.Context) error { return nil }); !ran || err != nil {
		t.Fatalf("second Run = %v, %v", ran, err)
	}
}

func TestRunSkipsWhileHeld(t *testing.T) {
	e := newLocal(t)
	ctx := context.Background()
	ran, err := e.Run(ctx, "job", func(ctx context.Context) error {
		// Another goroutine's run of the same task skips at once, even
		// with a deadline.
		res := make(chan bool)
		go func() {
			dctx, cancel := context.WithTimeout(context.Background(), time.Hour)
			defer cancel()
			ran, err := e.Run(dctx, "job", func(context.Context) error { return nil })
			if err != nil {
				t.Errorf("nested Run: %v", err)
			}
			res <- ran
		}()
		if <-res {
			t.Error("a second run of a held task ran")
		}
		// Another name runs.
		other := make(chan bool)
		go func() {
			ran, _ := e.Run(context.Background(), "other", func(context.Context) error { return nil })
			other <- ran
		}()
		if !<-other {
			t.Error("an independent task did not run")
		}
		return nil
	})
	if !ran || err != nil {
		t.Fatalf("Run = %v, %v", ran, err)
	}
}

func TestTryLockErrLocked(t *testing.T) {
	e := newLocal(t)
	ctx := context.Background()
	l, err := e.TryLock(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.TryLock(ctx, "job"); !errors.Is(err, tasklock.ErrLocked) {
		t.Fatalf("second TryLock: %v, want ErrLocked", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); !errors.Is(err, tasklock.ErrNotLocked) {
		t.Fatalf("second Unlock: %v, want ErrNotLocked", err)
	}
	if err := l.Extend(ctx, time.Second, 0); !errors.Is(err, tasklock.ErrNotLocked) {
		t.Fatalf("Extend after Unlock: %v, want ErrNotLocked", err)
	}
}

func TestInvalidConfig(t *testing.T) {
	e := newLocal(t)
	ctx := context.Background()
	for name, c := range map[string]struct {
		name string
		opts []tasklock.Option
	}{
		"empty name":      {"", nil},
		"zero atMost":     {"j", []tasklock.Option{tasklock.LockAtMostFor(0)}},
		"negative least":  {"j", []tasklock.Option{tasklock.LockAtLeastFor(-1)}},
		"least over most": {"j", []tasklock.Option{tasklock.LockAtMostFor(time.Second), tasklock.LockAtLeastFor(2 * time.Second)}},
	} {
		ran, err := e.Run(ctx, c.name, func(context.Context) error { return nil }, c.opts...)
		if ran || !errors.Is(err, tasklock.ErrInvalidConfig) {
			t.Errorf("%s: Run = %v, %v; want ErrInvalidConfig", name, ran, err)
		}
	}
}

func TestAssertLocked(t *testing.T) {
	ctx := context.Background()
	if err := tasklock.AssertLocked(ctx); !errors.Is(err, tasklock.ErrNotLocked) {
		t.Fatalf("AssertLocked(Background) = %v, want ErrNotLocked", err)
	}
	if err := tasklock.AssertLocked(tasklock.AssumeLocked(ctx)); err != nil {
		t.Fatalf("AssertLocked(AssumeLocked) = %v", err)
	}
	if err := tasklock.Extend(tasklock.AssumeLocked(ctx), time.Second, 0); err != nil {
		t.Fatalf("Extend(AssumeLocked) = %v", err)
	}
	if err := tasklock.Extend(ctx, time.Second, 0); !errors.Is(err, tasklock.ErrNotLocked) {
		t.Fatalf("Extend(Background) = %v, want ErrNotLocked", err)
	}
	// A context kept past the run no longer asserts.
	e := newLocal(t)
	var kept context.Context
	e.Run(ctx, "job", func(ctx context.Context) error { kept = ctx; return nil })
	if err := tasklock.AssertLocked(kept); !errors.Is(err, tasklock.ErrNotLocked) {
		t.Fatalf("AssertLocked after the run = %v, want ErrNotLocked", err)
	}
}

func TestReentrantAndNested(t *testing.T) {
	e := newLocal(t)
	ctx := context.Background()
	var inner, nested bool
	ran, err := e.Run(ctx, "outer", func(ctx context.Context) error {
		outer := tasklock.LockFrom(ctx)
		// Same name: runs at once under the same lock.
		if _, err := e.Run(ctx, "outer", func(ctx context.Context) error {
			inner = tasklock.LockFrom(ctx) == outer
			return nil
		}); err != nil {
			return err
		}
		// Another name: a lock of its own, innermost while it runs.
		_, err := e.Run(ctx, "nested", func(ctx context.Context) error {
			l := tasklock.LockFrom(ctx)
			nested = l != nil && l.Name() == "nested"
			return tasklock.Extend(ctx, time.Minute, 0)
		})
		return err
	})
	if !ran || err != nil || !inner || !nested {
		t.Fatalf("Run = %v, %v; reentrant %v, nested %v", ran, err, inner, nested)
	}
}

// Unlike ShedLock, a task whose lease runs out is told through its context.
func TestLeaseEndCancelsTask(t *testing.T) {
	e := newLocal(t)
	ran, err := e.Run(context.Background(), "job", func(ctx context.Context) error {
		<-ctx.Done()
		if err := tasklock.AssertLocked(ctx); !errors.Is(err, registry.ErrLockLost) {
			t.Errorf("AssertLocked after the lease ran out = %v, want ErrLockLost", err)
		}
		return context.Cause(ctx)
	}, tasklock.LockAtMostFor(20*time.Millisecond))
	if !ran || !errors.Is(err, registry.ErrLockLost) {
		t.Fatalf("Run = %v, %v; want true, ErrLockLost", ran, err)
	}
}

func TestPanicReleases(t *testing.T) {
	e := newLocal(t)
	func() {
		defer func() {
			if recover() == nil {
				t.Error("the panic did not propagate")
			}
		}()
		e.Run(context.Background(), "job", func(context.Context) error { panic("boom") })
	}()
	if ran, _ := e.Run(context.Background(), "job", func(context.Context) error { return nil }); !ran {
		t.Fatal("the lock stayed held after a panic")
	}
}

// Without a Releaser, lockAtLeastFor is kept by holding the lock.
func TestLockAtLeastForFallback(t *testing.T) {
	e := newLocal(t)
	ctx := context.Background()
	noop := func(context.Context) error { return nil }
	atLeast := tasklock.LockAtLeastFor(100 * time.Millisecond)
	if ran, err := e.Run(ctx, "job", noop, atLeast); !ran || err != nil {
		t.Fatalf("first Run = %v, %v", ran, err)
	}
	start := time.Now()
	ran, err := e.Run(ctx, "job", noop, atLeast)
	if err != nil || ran && time.Since(start) < 100*time.Millisecond {
		t.Fatalf("Run within lockAtLeastFor = %v, %v; want a skip", ran, err)
	}
	for {
		ran, err := e.Run(ctx, "job", noop)
		if err != nil {
			t.Fatal(err)
		}
		if ran {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Close ends a kept lock early.
	e.Run(ctx, "kept", noop, tasklock.LockAtLeastFor(time.Hour))
	if err := e.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Run(ctx, "job", noop); !errors.Is(err, registry.ErrClosed) {
		t.Fatalf("Run after Close = %v, want ErrClosed", err)
	}
}

func TestNewRejectsInvalidOptions(t *testing.T) {
	if e, err := tasklock.NewLocal(registry.WithIdleBetweenTries(0)); !errors.Is(err, registry.ErrInvalidOption) || e != nil {
		t.Fatalf("NewLocal: got %v, %v; want nil and an error wrapping registry.ErrInvalidOption", e, err)
	}
	if e, err := tasklock.New(nil); !errors.Is(err, registry.ErrInvalidOption) || e != nil {
		t.Fatalf("New(nil): got %v, %v; want nil and an error wrapping registry.ErrInvalidOption", e, err)
	}
}

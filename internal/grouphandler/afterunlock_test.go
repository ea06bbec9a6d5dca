package grouphandler

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/lockreg/lockreg/internal/testpub"
)

func TestAfterUnlockRunsOnceTheLockIsFreeAndOnlyAfterWorkThatSucceeded(t *testing.T) {
	ctx := context.Background()
	c := New(testKind(), Settings{Publisher: testpub.NewRecorder(), OutputTopic: "out", Logger: watermill.NopLogger{}})
	var free []bool
	probe := func(context.Context) error {
		l := c.s.Locks.Obtain("test:k")
		ok, err := l.TryLockContext(ctx) // one attempt
		if err != nil {
			return err
		}
		if ok {
			l.Unlock()
		}
		free = append(free, ok)
		return nil
	}
	if err := c.WithLock(ctx, "k", func(ctx context.Context) error { AfterUnlock(ctx, probe); return nil }); err != nil {
		t.Fatal(err)
	}
	failed := errors.New("work failed")
	if err := c.WithLock(ctx, "k", func(ctx context.Context) error { AfterUnlock(ctx, probe); return failed }); !errors.Is(err, failed) {
		t.Fatalf("WithLock: %v, want the work's error", err)
	}
	if !slices.Equal(free, []bool{true}) {
		t.Errorf("deferred runs saw the lock free: %v, want one run, lock free", free)
	}
}

func TestAfterUnlockOutsideLockedWorkPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("AfterUnlock outside WithLock did not panic")
		}
	}()
	AfterUnlock(context.Background(), func(context.Context) error { return nil })
}

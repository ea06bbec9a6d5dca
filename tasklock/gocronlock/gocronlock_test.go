package gocronlock_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/google/uuid"
	"go.uber.org/goleak"
	_ "modernc.org/sqlite"

	"github.com/lockreg/lockreg/jdbc"
	"github.com/lockreg/lockreg/tasklock"
	"github.com/lockreg/lockreg/tasklock/gocronlock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Two schedulers, standing for two instances, run the same one-time job at
// once on one SQLite lock table: it runs exactly once, and the other
// scheduler reports a lock error (ErrLocked) and skips.
func TestWithDistributedLocker(t *testing.T) {
	file := filepath.Join(t.TempDir(), "lock.db")
	db, err := sql.Open("sqlite", "file:"+file+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	if err := jdbc.CreateSchema(ctx, db); err != nil {
		t.Fatal(err)
	}

	var runs, skips atomic.Int32
	settled := make(chan struct{}, 2)
	var schedulers []gocron.Scheduler
	for range 2 {
		repo, err := jdbc.NewLockRepository(ctx, db)
		if err != nil {
			t.Fatal(err)
		}
		e, err := tasklock.New(repo)
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close(ctx)
		// lockAtLeastFor longer than the test: the later scheduler skips
		// even if the earlier one has finished.
		s, err := gocron.NewScheduler(gocron.WithDistributedLocker(
			gocronlock.New(e, tasklock.LockAtMostFor(time.Minute), tasklock.LockAtLeastFor(time.Minute))))
		if err != nil {
			t.Fatal(err)
		}
		_, err = s.NewJob(gocron.OneTimeJob(gocron.OneTimeJobStartImmediately()),
			gocron.NewTask(func() { runs.Add(1) }),
			gocron.WithName("report"),
			gocron.WithEventListeners(
				gocron.AfterJobRuns(func(uuid.UUID, string) { settled <- struct{}{} }),
				gocron.AfterLockError(func(_ uuid.UUID, _ string, err error) {
					if errors.Is(err, tasklock.ErrLocked) {
						skips.Add(1)
					} else {
						t.Errorf("lock error: %v", err)
					}
					settled <- struct{}{}
				})))
		if err != nil {
			t.Fatal(err)
		}
		schedulers = append(schedulers, s)
	}
	for _, s := range schedulers {
		s.Start()
	}
	<-settled
	<-settled
	for _, s := range schedulers {
		if err := s.Shutdown(); err != nil {
			t.Fatal(err)
		}
	}
	if runs.Load() != 1 || skips.Load() != 1 {
		t.Fatalf("%d runs and %d skips, want 1 and 1", runs.Load(), skips.Load())
	}
}

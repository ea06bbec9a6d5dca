package tasklock_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/uuid"

	"github.com/lockreg/lockreg/internal/testdb"
	"github.com/lockreg/lockreg/jdbc"
	"github.com/lockreg/lockreg/registry"
	"github.com/lockreg/lockreg/tasklock"
)

// Tests of scheduled-task locks (package tasklock) on the three databases:
// ShedLock's provider test list (AbstractLockProviderIntegrationTest,
// AbstractExtensibleLockProviderIntegrationTest, the JDBC suite), the
// ShedLock faults lockreg must not have, lockAtLeastFor and a fuzz test.

var _ tasklock.Releaser = (*jdbc.LockRepository)(nil)

// taskNode is one instance: an executor on its own repository (client id)
// in region.
type taskNode struct {
	*tasklock.Executor
	repo *jdbc.LockRepository
}

func newTaskNode(t testing.TB, db jdbc.DB, region string, opts ...registry.Option) taskNode {
	t.Helper()
	repo, err := jdbc.NewLockRepository(context.Background(), db, jdbc.WithRegion(region))
	if err != nil {
		t.Fatal(err)
	}
	e, err := tasklock.New(repo, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return taskNode{e, repo}
}

// taskName returns a fresh task name (ShedLock's LOCK_NAME1 is a random UUID
// per test too).
func taskName() string { return "task-" + uuid.NewString() }

const lockTable = "INT_LOCK"

// taskLocked reports whether the row of name is taken by the database's
// clock (ShedLock's assertLocked/assertUnlocked), and how long it stays so.
func taskLocked(t testing.TB, db testdb.Backend, region, name string) (bool, time.Duration) {
	t.Helper()
	_, remaining, ok := taskRow(t, db, region, name)
	return ok && remaining > 0, remaining
}

// taskRow reads the owner of name's row ("" for nobody) and how long it
// stays taken by the database's clock, or reports false if there is none.
func taskRow(t testing.TB, db testdb.Backend, region, name string) (owner string, remaining time.Duration, ok bool) {
	t.Helper()
	l, ok := db.Lease(t, lockTable, region, jdbc.UUIDKey(name))
	return l.ClientID, l.Remaining, ok
}

var ctxb = context.Background()

func noop(context.Context) error { return nil }

func mustLock(t testing.TB, n taskNode, name string, opts ...tasklock.Option) *tasklock.Lock {
	t.Helper()
	l, err := n.TryLock(ctxb, name, opts...)
	if err != nil {
		t.Fatalf("TryLock(%q): %v", name, err)
	}
	return l
}

func mustSkip(t testing.TB, n taskNode, name string) {
	t.Helper()
	if l, err := n.TryLock(ctxb, name); !errors.Is(err, tasklock.ErrLocked) {
		if l != nil {
			l.Unlock(ctxb)
		}
		t.Fatalf("TryLock(%q) = %v, want ErrLocked", name, err)
	}
}

// eventually polls try until it reports true; it fails t after a minute.
func eventually(t testing.TB, what string, try func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !try() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: never happened", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ShedLock: shouldCreateLock, shouldNotReturnSecondLock,
// shouldCreateTwoIndependentLocks, shouldLockTwiceInARow,
// shouldBeAbleToLockRightAfterUnlock.
func TestTaskLockBasics(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, db testdb.Backend) {
		region := testdb.RandomRegion()
		a, b := newTaskNode(t, db.DB, region), newTaskNode(t, db.DB, region)
		name, name2 := taskName(), taskName()

		l := mustLock(t, a, name, tasklock.LockAtMostFor(5*time.Minute))
		if ok, _ := taskLocked(t, db, region, name); !ok {
			t.Fatal("the row is not locked after TryLock")
		}
		mustSkip(t, a, name) // same instance: not reentrant outside Run
		mustSkip(t, b, name)
		l2 := mustLock(t, b, name2) // independent
		if err := l.Unlock(ctxb); err != nil {
			t.Fatal(err)
		}
		if ok, _ := taskLocked(t, db, region, name); ok {
			t.Fatal("the row is still locked after Unlock")
		}
		if err := l2.Unlock(ctxb); err != nil {
			t.Fatal(err)
		}
		for i := range 10 { // lock right after unlock, twice in a row
			n := []taskNode{a, b}[i%2]
			l := mustLock(t, n, name)
			mustSkip(t, []taskNode{a, b}[(i+1)%2], name)
			if err := l.Unlock(ctxb); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// ShedLock: shouldTimeout; and a lost lease is reported at release.
func TestTaskLockTimeout(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, db testdb.Backend) {
		region := testdb.RandomRegion()
		a, b := newTaskNode(t, db.DB, region), newTaskNode(t, db.DB, region)
		name := taskName()
		// Each statement is bounded by the lease: a lease of milliseconds
		// fails its own acquisition when the machine is loaded.
		l := mustLock(t, a, name, tasklock.LockAtMostFor(time.Second))
		var l2 *tasklock.Lock
		eventually(t, "taking the expired lock", func() bool {
			var err error
			l2, err = b.TryLock(ctxb, name)
			return err == nil
		})
		<-l.Done() // closed by the safety margin at the latest
		if err := l.Unlock(ctxb); !errors.Is(err, registry.ErrLockLost) {
			t.Fatalf("Unlock of the expired lock = %v, want ErrLockLost", err)
		}
		if ok, _ := taskLocked(t, db, region, name); !ok {
			t.Fatal("the stale holder's Unlock released the new holder's lock")
		}
		if err := l2.Unlock(ctxb); err != nil {
			t.Fatal(err)
		}
	})
}

// ShedLock: shouldCreateLockIfRecordAlreadyExists (a Spring row that
// expired a day ago).
func TestTaskLockTakesExistingRow(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, db testdb.Backend) {
		region := testdb.RandomRegion()
		a := newTaskNode(t, db.DB, region)
		name := taskName()
		day := time.Now().Add(-24 * time.Hour)
		db.InsertSpringRow(t, lockTable, region, jdbc.UUIDKey(name), uuid.NewString(), day, day)
		if ran, err := a.Run(ctxb, name, noop); !ran || err != nil {
			t.Fatalf("Run = %v, %v", ran, err)
		}
	})
}

// ShedLock: shouldLockAtLeastFor, on the database's clock, and the
// behaviour of Run: an attempt within lockAtLeastFor skips, by any
// instance including the one that ran; after it, one runs.
func TestTaskLockAtLeastFor(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, db testdb.Backend) {
		region := testdb.RandomRegion()
		a, b := newTaskNode(t, db.DB, region), newTaskNode(t, db.DB, region)
		name := taskName()
		const atLeast = 2 * time.Second
		opts := []tasklock.Option{tasklock.LockAtMostFor(4 * time.Second), tasklock.LockAtLeastFor(atLeast)}
		start := time.Now()
		if ran, err := a.Run(ctxb, name, noop, opts...); !ran || err != nil {
			t.Fatalf("Run = %v, %v", ran, err)
		}
		ok, remaining := taskLocked(t, db, region, name)
		if !ok || remaining > atLeast {
			t.Fatalf("after the run the row is locked %v for %v; want locked for at most %v", ok, remaining, atLeast)
		}
		if owner, _, _ := taskRow(t, db, region, name); owner != "" {
			t.Fatalf("the kept row belongs to %q, want nobody", owner)
		}
		for _, n := range []taskNode{a, b} {
			ran, err := n.Run(ctxb, name, noop, opts...)
			if err != nil {
				t.Fatal(err)
			}
			if ran && time.Since(start) < atLeast {
				t.Fatal("a run within lockAtLeastFor ran")
			}
		}
		eventually(t, "a run after lockAtLeastFor", func() bool {
			ran, err := b.Run(ctxb, name, noop)
			if err != nil {
				t.Fatal(err)
			}
			return ran
		})
		if elapsed := time.Since(start); elapsed < atLeast-50*time.Millisecond {
			// The database's clock and this host's run at the same rate:
			// a run this early means lockAtLeastFor was not kept.
			t.Fatalf("ran again after %v, before lockAtLeastFor %v", elapsed, atLeast)
		}
	})
}

// ShedLock's extension tests: shouldBeAbleToExtendLock,
// shouldBeAbleToExtendMultipleTimes, shouldNotBeAbleToExtendUnlockedLock,
// shouldBeAbleToExtendAtLeast.
func TestTaskLockExtend(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, db testdb.Backend) {
		region := testdb.RandomRegion()
		a, b := newTaskNode(t, db.DB, region), newTaskNode(t, db.DB, region)
		name := taskName()
		ran, err := a.Run(ctxb, name, func(ctx context.Context) error {
			for range 3 {
				if err := tasklock.Extend(ctx, 10*time.Second, 0); err != nil {
					return err
				}
				if ok, rem := taskLocked(t, db, region, name); !ok || rem <= 2*time.Second {
					t.Errorf("after Extend the lease has %v left, want more than the original 2s", rem)
				}
			}
			// Unlock honours a lockAtLeastFor given to Extend.
			return tasklock.Extend(ctx, 10*time.Second, 9*time.Second)
		}, tasklock.LockAtMostFor(2*time.Second))
		if !ran || err != nil {
			t.Fatalf("Run = %v, %v", ran, err)
		}
		if ok, _ := taskLocked(t, db, region, name); !ok {
			t.Fatal("the lockAtLeastFor given to Extend was not kept")
		}
		mustSkip(t, b, name)

		name = taskName()
		l := mustLock(t, a, name)
		if err := l.Unlock(ctxb); err != nil {
			t.Fatal(err)
		}
		if err := l.Extend(ctxb, time.Minute, 0); !errors.Is(err, tasklock.ErrNotLocked) {
			t.Fatalf("Extend after Unlock = %v, want ErrNotLocked", err)
		}
	})
}

// ShedLock fault: extension of an already-expired lock
// (shouldNotBeAbleToExtendExpiredLock). Renew never revives a lease.
func TestTaskLockNoExtendOfExpired(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, db testdb.Backend) {
		region := testdb.RandomRegion()
		a := newTaskNode(t, db.DB, region)
		name := taskName()
		l := mustLock(t, a, name, tasklock.LockAtMostFor(time.Second))
		eventually(t, "expiry", func() bool { _, rem, _ := taskRow(t, db, region, name); return rem < -time.Millisecond })
		if err := l.Extend(ctxb, time.Minute, 0); !errors.Is(err, registry.ErrLockLost) {
			t.Fatalf("Extend of an expired lock = %v, want ErrLockLost", err)
		}
		if ok, _ := taskLocked(t, db, region, name); ok {
			t.Fatal("the failed extension locked the row")
		}
		<-l.Done()
		l.Unlock(ctxb)
	})
}

// ShedLock fault: a deleted row stops the task until restart (their insert
// cache). Here the next run inserts it again, also while held elsewhere.
func TestTaskLockDeletedRow(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, db testdb.Backend) {
		region := testdb.RandomRegion()
		a := newTaskNode(t, db.DB, region)
		name := taskName()
		del := func() {
			db.Exec(t, `DELETE FROM `+lockTable+` WHERE REGION = ? AND LOCK_KEY = ?`, region, jdbc.UUIDKey(name))
		}
		for i := range 3 {
			if ran, err := a.Run(ctxb, name, noop, tasklock.LockAtLeastFor(time.Hour)); !ran || err != nil {
				t.Fatalf("run %d after deleting the row = %v, %v", i, ran, err)
			}
			del()
		}
		// Deleted while running: the run ends with ErrLockLost reported,
		// and the next run goes ahead.
		ran, err := a.Run(ctxb, name, func(context.Context) error { del(); return nil })
		if !ran || !errors.Is(err, registry.ErrLockLost) {
			t.Fatalf("Run whose row was deleted = %v, %v; want true, ErrLockLost", ran, err)
		}
		if ran, err := a.Run(ctxb, name, noop); !ran || err != nil {
			t.Fatalf("Run after that = %v, %v", ran, err)
		}
	})
}

// ShedLock fault: any process on the same host can unlock (their
// locked_by is the host name). Here owners are per-client UUIDs.
func TestTaskLockOtherClientCannotUnlock(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, db testdb.Backend) {
		region := testdb.RandomRegion()
		a, b := newTaskNode(t, db.DB, region), newTaskNode(t, db.DB, region)
		name := taskName()
		l := mustLock(t, a, name)
		if err := b.repo.Release(ctxb, name); !errors.Is(err, registry.ErrLockLost) {
			t.Fatalf("another client's Release = %v, want ErrLockLost", err)
		}
		if err := b.repo.ReleaseAfter(ctxb, name, 0); !errors.Is(err, registry.ErrLockLost) {
			t.Fatalf("another client's ReleaseAfter = %v, want ErrLockLost", err)
		}
		if err := b.repo.Renew(ctxb, name, time.Hour); !errors.Is(err, registry.ErrLockLost) {
			t.Fatalf("another client's Renew = %v, want ErrLockLost", err)
		}
		if owner, _, _ := taskRow(t, db, region, name); owner != a.repo.ClientID() {
			t.Fatalf("the row belongs to %q, want %q", owner, a.repo.ClientID())
		}
		mustSkip(t, b, name)
		if err := l.Unlock(ctxb); err != nil {
			t.Fatal(err)
		}
	})
}

// ReleaseAfter measures lockAtLeastFor from the acquisition exactly: the
// kept row expires lockAtLeastFor after its CREATED_DATE (the acquisition of
// a new row), not a rounding step later, on every database's clock. On
// SQLite the token once came from julianday's doubles, about 40 µs coarse,
// and the expiry was rounded to the nearest millisecond after adding 999 µs.
func TestTaskReleaseAfterEndsExactlyLockAtLeastForAfterAcquisition(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, db testdb.Backend) {
		region := testdb.RandomRegion()
		repo, err := jdbc.NewLockRepository(ctxb, db.DB, jdbc.WithRegion(region))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { repo.Close(ctxb) })
		span := db.Micros(`EXPIRED_AFTER`) + ` - ` + db.Micros(`CREATED_DATE`)
		const atLeast = time.Hour + 7*time.Millisecond
		for i := range 20 {
			name := fmt.Sprintf("%s-%d", taskName(), i)
			if _, ok, err := repo.Acquire(ctxb, name, time.Minute); !ok || err != nil {
				t.Fatalf("Acquire = %v, %v", ok, err)
			}
			if err := repo.ReleaseAfter(ctxb, name, atLeast); err != nil {
				t.Fatal(err)
			}
			var micros int64
			if err := db.DB.QueryRowContext(ctxb, db.Q(`SELECT `+span+` FROM `+lockTable+` WHERE REGION = ? AND LOCK_KEY = ?`),
				region, jdbc.UUIDKey(name)).Scan(&micros); err != nil {
				t.Fatal(err)
			}
			if got := time.Duration(micros) * time.Microsecond; got != atLeast {
				t.Fatalf("acquisition %d: the row is kept %v after it was taken, want exactly %v", i, got, atLeast)
			}
		}
	})
}

// ShedLock fault: double execution when nodes' clocks differ (app time is
// their default). Node b runs in a synctest bubble, whose clock reads
// 2000-01-01: 26 years behind node a, which runs outside it (b asks it to
// act through a goroutine outside the bubble). Nothing b's clock says
// reaches the database, so neither node takes the other's lock, and
// lockAtLeastFor written by either holds for both.
func TestTaskLockClockSkew(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, db testdb.Backend) {
		region := testdb.RandomRegion()
		a := newTaskNode(t, db.DB, region)
		name, name2 := taskName(), taskName()
		var runs atomic.Int32
		count := func(context.Context) error { runs.Add(1); return nil }
		opts := []tasklock.Option{tasklock.LockAtMostFor(time.Hour), tasklock.LockAtLeastFor(time.Hour)}
		aRun := func(name string) (bool, error) { return a.Run(ctxb, name, count, opts...) }

		calls, done := make(chan func()), make(chan struct{})
		defer close(calls)
		go func() {
			for f := range calls {
				f()
				done <- struct{}{}
			}
		}()
		onA := func(f func()) { calls <- f; <-done }

		// a runs first and keeps the lock for an hour of database time.
		if ran, err := aRun(name); !ran || err != nil {
			t.Fatalf("a: Run = %v, %v", ran, err)
		}
		synctest.Test(t, func(t *testing.T) {
			if time.Now().Year() != 2000 {
				t.Fatalf("the bubble's clock reads %v", time.Now())
			}
			// A pool of b's own, so that its connections are made in the
			// bubble and closed before it ends.
			bdb, err := sql.Open(db.Driver, db.DSN)
			if err != nil {
				t.Fatal(err)
			}
			defer bdb.Close()
			repo, err := jdbc.NewLockRepository(context.Background(), bdb, jdbc.WithRegion(region))
			if err != nil {
				t.Fatal(err)
			}
			b, err := tasklock.New(repo)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close(ctxb)

			if ran, err := b.Run(ctxb, name, count, opts...); ran || err != nil {
				t.Errorf("b, whose clock is behind: Run = %v, %v; want a skip", ran, err)
			}
			// b holds another task; a must not take it.
			l, err := b.TryLock(ctxb, name2, opts...)
			if err != nil {
				t.Fatalf("b: TryLock: %v", err)
			}
			onA(func() {
				if ran, err := aRun(name2); ran || err != nil {
					t.Errorf("a, while b holds the lock: Run = %v, %v; want a skip", ran, err)
				}
			})
			// b's release keeps it for lockAtLeastFor: a still skips.
			if err := l.Unlock(ctxb); err != nil {
				t.Fatalf("b: Unlock: %v", err)
			}
			onA(func() {
				if ran, err := aRun(name2); ran || err != nil {
					t.Errorf("a, within b's lockAtLeastFor: Run = %v, %v; want a skip", ran, err)
				}
			})
		})
		if n := runs.Load(); n != 1 {
			t.Fatalf("%d runs, want 1", n)
		}
	})
}

// ShedLock's FuzzTester made harder: eight goroutines, each an instance of
// its own (registry and client id), two task names, lockAtLeastFor 5 ms.
// The critical section is a read, a pause and a write of a counter: a
// second runner inside at the same time loses an update, so exact counts
// prove mutual exclusion, and reaching them proves liveness.
func TestTaskLockFuzz(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, db testdb.Backend) {
		const (
			goroutines = 8
			iterations = 50
			short      = 10 // goroutine 0's quota, ShedLock's SHORT_ITERATION
		)
		region := testdb.RandomRegion()
		names := [2]string{taskName(), taskName()}
		var counters [2]atomic.Int64
		var inside [2]atomic.Int32
		var wg sync.WaitGroup
		errs := make(chan error, goroutines)
		for g := range goroutines {
			n := newTaskNode(t, db.DB, region)
			job := g % 2
			quota := iterations
			if g == 0 {
				quota = short
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for done := 0; done < quota; {
					ran, err := n.Run(ctxb, names[job], func(ctx context.Context) error {
						if inside[job].Add(1) != 1 {
							return fmt.Errorf("two runners of %s at once", names[job])
						}
						defer inside[job].Add(-1)
						v := counters[job].Load()
						time.Sleep(time.Millisecond)
						counters[job].Store(v + 1)
						return nil
					}, tasklock.LockAtMostFor(5*time.Minute), tasklock.LockAtLeastFor(5*time.Millisecond))
					if err != nil {
						errs <- err
						return
					}
					if ran {
						done++
					} else {
						time.Sleep(time.Millisecond) // ShedLock spins; 2 cores here
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		want := [2]int64{(goroutines/2-1)*iterations + short, goroutines / 2 * iterations}
		for job := range 2 {
			if got := counters[job].Load(); got != want[job] {
				t.Errorf("job %d ran %d times, want %d", job+1, got, want[job])
			}
		}
	})
}

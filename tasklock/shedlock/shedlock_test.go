package shedlock_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	_ "time/tzdata" // America/New_York on machines without a zone database

	"github.com/google/uuid"
	"go.uber.org/goleak"

	"github.com/lockreg/lockreg/internal/testdb"
	"github.com/lockreg/lockreg/jdbc"
	"github.com/lockreg/lockreg/registry"
	"github.com/lockreg/lockreg/tasklock"
	"github.com/lockreg/lockreg/tasklock/shedlock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var ctxb = context.Background()

const long = 30 * time.Second // a lease that must not expire during a test

// newTable creates a ShedLock table of its own for t with CreateSchema and
// drops it when t ends.
func newTable(t testing.TB, db testdb.Backend) string {
	t.Helper()
	table := "shedlock_" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	if err := shedlock.CreateSchema(ctxb, db.DB, shedlock.Config{Table: table}); err != nil {
		t.Fatalf("CreateSchema: %v", err)
	}
	t.Cleanup(func() { db.DB.ExecContext(ctxb, `DROP TABLE `+table) })
	return table
}

func newRepo(t testing.TB, db testdb.Backend, cfg shedlock.Config) *shedlock.Repository {
	t.Helper()
	r, err := shedlock.NewRepository(ctxb, db.DB, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(ctxb) })
	return r
}

func newExecutor(t testing.TB, db testdb.Backend, cfg shedlock.Config) *tasklock.Executor {
	t.Helper()
	r, err := shedlock.NewRepository(ctxb, db.DB, cfg)
	if err != nil {
		t.Fatal(err)
	}
	e, err := tasklock.New(r, registry.WithTTL(long))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Close(ctxb); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return e
}

// modes runs test in ShedLock's two time modes.
func modes(t *testing.T, test func(t *testing.T, dbTime bool)) {
	for _, m := range []struct {
		name   string
		dbTime bool
	}{{"app-time", false}, {"db-time", true}} {
		t.Run(m.name, func(t *testing.T) { test(t, m.dbTime) })
	}
}

// shedlockSupports reports whether ShedLock supports db's server: it has
// no SQLite provider.
func shedlockSupports(db testdb.Backend) bool { return db.Dialect != jdbc.SQLite }

// withJava runs test on the servers ShedLock supports, in both modes.
func withJava(t *testing.T, test func(t *testing.T, db testdb.Backend, dbTime bool)) {
	testdb.ForEachWhere(t, shedlockSupports, func(t *testing.T, db testdb.Backend) {
		modes(t, func(t *testing.T, dbTime bool) { test(t, db, dbTime) })
	})
}

func mustLock(t testing.TB, e *tasklock.Executor, name string, opts ...tasklock.Option) *tasklock.Lock {
	t.Helper()
	l, err := e.TryLock(ctxb, name, opts...)
	if err != nil {
		t.Fatalf("Go TryLock(%q): %v", name, err)
	}
	return l
}

func mustSkip(t testing.TB, e *tasklock.Executor, name string) {
	t.Helper()
	if l, err := e.TryLock(ctxb, name); !errors.Is(err, tasklock.ErrLocked) {
		if l != nil {
			l.Unlock(ctxb)
		}
		t.Fatalf("Go TryLock(%q) = %v, want ErrLocked", name, err)
	}
}

func TestGoAndJavaHandTheLockOverBothWays(t *testing.T) {
	withJava(t, func(t *testing.T, db testdb.Backend, dbTime bool) {
		table := newTable(t, db)
		g := newExecutor(t, db, shedlock.Config{Table: table, UseDBTime: dbTime})
		j := newJava(db, table, dbTime, nil)
		const name = "report"

		gl := mustLock(t, g, name)
		if _, ok := j.lock(t, name, long, 0); ok {
			t.Fatal("Java took the lock Go holds")
		}
		if err := gl.Unlock(ctxb); err != nil {
			t.Fatal(err)
		}
		jl, ok := j.lock(t, name, long, 0)
		if !ok {
			t.Fatal("Java did not take the lock Go released")
		}
		mustSkip(t, g, name)
		if !j.unlock(t, jl) {
			t.Fatal("Java's unlock found no row of its own")
		}
		mustLock(t, g, name).Unlock(ctxb)
	})
}

func TestGoDoesNotUnlockOrExtendJavasLock(t *testing.T) {
	withJava(t, func(t *testing.T, db testdb.Backend, dbTime bool) {
		table := newTable(t, db)
		r := newRepo(t, db, shedlock.Config{Table: table, UseDBTime: dbTime})
		j := newJava(db, table, dbTime, nil)
		jl, ok := j.lock(t, "job", long, 0)
		if !ok {
			t.Fatal("Java did not take a free lock")
		}
		if err := r.Release(ctxb, "job"); !errors.Is(err, registry.ErrLockLost) {
			t.Fatalf("Release of Java's lock = %v, want ErrLockLost", err)
		}
		if err := r.Renew(ctxb, "job", long); !errors.Is(err, registry.ErrLockLost) {
			t.Fatalf("Renew of Java's lock = %v, want ErrLockLost", err)
		}
		if !j.extend(t, jl, long) {
			t.Fatal("Java could not extend its lock after Go's attempts")
		}
	})
}

// ShedLock's lockAtLeastFor: after Java's run, unlock leaves lock_until at
// acquisition + lockAtLeastFor, which Go respects; and the other way.
func TestLockAtLeastForIsKeptAcrossGoAndJava(t *testing.T) {
	withJava(t, func(t *testing.T, db testdb.Backend, dbTime bool) {
		table := newTable(t, db)
		g := newExecutor(t, db, shedlock.Config{Table: table, UseDBTime: dbTime})
		j := newJava(db, table, dbTime, nil)
		const atLeast = time.Hour

		jl, ok := j.lock(t, "java-first", long, atLeast)
		if !ok {
			t.Fatal("Java did not take a free lock")
		}
		j.unlock(t, jl)
		mustSkip(t, g, "java-first")
		wantHeldFor(t, db, table, "java-first", atLeast)

		ran, err := g.Run(ctxb, "go-first", func(context.Context) error { return nil }, tasklock.LockAtLeastFor(atLeast))
		if !ran || err != nil {
			t.Fatalf("Go Run = %v, %v", ran, err)
		}
		if _, ok := j.lock(t, "go-first", long, 0); ok {
			t.Fatal("Java took the lock within Go's lockAtLeastFor")
		}
		wantHeldFor(t, db, table, "go-first", atLeast)
	})
}

// wantHeldFor checks that name's row is taken until exactly d after its
// locked_at (to the millisecond the tables keep, plus the gap between
// ShedLock's createdAt and the statement's now in application time).
func wantHeldFor(t testing.TB, db testdb.Backend, table, name string, d time.Duration) {
	t.Helper()
	r, err := readRow(t, db, table, name)
	if err != nil {
		t.Fatal(err)
	}
	got := time.Duration(r.lockUntil-r.lockedAt) * time.Millisecond
	if got < d-time.Second || got > d {
		t.Fatalf("lock_until - locked_at = %v, want %v", got, d)
	}
}

// Contention: Go executors and Java clients run one task over and over;
// never two at once, and both sides run it.
func TestGoAndJavaNeverRunATaskTogether(t *testing.T) {
	withJava(t, func(t *testing.T, db testdb.Backend, dbTime bool) {
		table := newTable(t, db)
		const name = "contended"
		var inside, double atomic.Int32
		var goRuns, javaRuns atomic.Int32
		enter := func() {
			if inside.Add(1) != 1 {
				double.Add(1)
			}
		}
		leave := func() { inside.Add(-1) }
		done := func() bool { return goRuns.Load() >= 20 && javaRuns.Load() >= 20 }
		deadline := time.Now().Add(2 * time.Minute)
		var wg sync.WaitGroup
		for i := range 2 {
			g := newExecutor(t, db, shedlock.Config{Table: table, UseDBTime: dbTime})
			j := newJava(db, table, dbTime, nil)
			j.lockedBy = "java-host-" + string(rune('a'+i))
			wg.Add(2)
			go func() {
				defer wg.Done()
				for !done() && time.Now().Before(deadline) {
					ran, err := g.Run(ctxb, name, func(context.Context) error {
						enter()
						defer leave()
						goRuns.Add(1)
						return nil
					})
					if err != nil {
						t.Errorf("Go Run: %v", err)
						return
					}
					if !ran {
						time.Sleep(time.Millisecond) // a scheduler's next tick
					}
				}
			}()
			go func() {
				defer wg.Done()
				for !done() && time.Now().Before(deadline) {
					jl, ok := j.lock(t, name, long, 0)
					if !ok {
						time.Sleep(time.Millisecond)
						continue
					}
					enter()
					javaRuns.Add(1)
					leave()
					if !j.unlock(t, jl) {
						t.Error("Java's unlock found no row of its own")
						return
					}
				}
			}()
		}
		wg.Wait()
		if n := double.Load(); n != 0 {
			t.Fatalf("%d runs overlapped another", n)
		}
		if !done() {
			t.Fatalf("Go ran %d times, Java %d; want 20 each", goRuns.Load(), javaRuns.Load())
		}
	})
}

// Java in application time binds wall times of its JVM's zone; Go set to
// that zone excludes it, though the zone is hours behind the database's
// UTC.
func TestGoInTheJavaFleetsZoneRespectsItsLocks(t *testing.T) {
	testdb.ForEachWhere(t, shedlockSupports, func(t *testing.T, db testdb.Backend) {
		ny, err := time.LoadLocation("America/New_York")
		if err != nil {
			t.Fatal(err)
		}
		table := newTable(t, db)
		g := newExecutor(t, db, shedlock.Config{Table: table, TimeZone: ny})
		j := newJava(db, table, false, ny)

		jl, ok := j.lock(t, "zoned", long, 0)
		if !ok {
			t.Fatal("Java did not take a free lock")
		}
		mustSkip(t, g, "zoned")
		j.unlock(t, jl)
		gl := mustLock(t, g, "zoned")
		if _, ok := j.lock(t, "zoned", long, 0); ok {
			t.Fatal("Java took the lock Go holds")
		}
		gl.Unlock(ctxb)
	})
}

// The same Java lock seen by Go left in UTC: its lock_until, New York wall
// time, lies hours in the past, so Go takes it. This is why TimeZone
// exists.
func TestGoInAnotherZoneThanJavasApplicationTimeTakesItsLock(t *testing.T) {
	testdb.ForEachWhere(t, shedlockSupports, func(t *testing.T, db testdb.Backend) {
		ny, err := time.LoadLocation("America/New_York")
		if err != nil {
			t.Fatal(err)
		}
		table := newTable(t, db)
		g := newExecutor(t, db, shedlock.Config{Table: table})
		j := newJava(db, table, false, ny)
		if _, ok := j.lock(t, "zoned", long, 0); !ok {
			t.Fatal("Java did not take a free lock")
		}
		mustLock(t, g, "zoned").Unlock(ctxb)
	})
}

// Go-only behaviour, on every database including SQLite.

func TestAcquireWritesShedLocksRow(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, db testdb.Backend) {
		modes(t, func(t *testing.T, dbTime bool) {
			table := newTable(t, db)
			r := newRepo(t, db, shedlock.Config{Table: table, UseDBTime: dbTime})
			if _, ok, err := r.Acquire(ctxb, "row", time.Minute); !ok || err != nil {
				t.Fatalf("Acquire = %v, %v", ok, err)
			}
			row, err := readRow(t, db, table, "row")
			if err != nil {
				t.Fatal(err)
			}
			host, _ := os.Hostname()
			if row.lockedBy != r.LockedBy() || !strings.HasPrefix(row.lockedBy, host+"/lockreg-") {
				t.Fatalf("locked_by = %q, want %q, the host name %q and a suffix", row.lockedBy, r.LockedBy(), host)
			}
			if d := time.Duration(row.lockUntil-row.lockedAt) * time.Millisecond; d != time.Minute {
				t.Fatalf("lock_until - locked_at = %v, want lockAtMostFor 1m", d)
			}
			if d := time.Duration(row.dbNow-row.lockedAt) * time.Millisecond; d < -5*time.Second || d > 5*time.Second {
				t.Fatalf("locked_at is %v from the database's UTC clock; want UTC wall time", d)
			}
		})
	})
}

func TestAHeldLockIsNotAcquiredAgainNorByAnother(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, db testdb.Backend) {
		modes(t, func(t *testing.T, dbTime bool) {
			table := newTable(t, db)
			a := newRepo(t, db, shedlock.Config{Table: table, UseDBTime: dbTime})
			b := newRepo(t, db, shedlock.Config{Table: table, UseDBTime: dbTime})
			if _, ok, err := a.Acquire(ctxb, "k", long); !ok || err != nil {
				t.Fatalf("Acquire = %v, %v", ok, err)
			}
			for _, r := range []*shedlock.Repository{a, b} {
				if _, ok, err := r.Acquire(ctxb, "k", long); ok || err != nil {
					t.Fatalf("Acquire of a held lock = %v, %v; want false, nil", ok, err)
				}
			}
			if err := a.Release(ctxb, "k"); err != nil {
				t.Fatal(err)
			}
			if _, ok, err := b.Acquire(ctxb, "k", long); !ok || err != nil {
				t.Fatalf("Acquire after the release = %v, %v", ok, err)
			}
		})
	})
}

// expireByHand sets name's lock_until an hour into the past (as a row
// whose holder died long ago).
func expireByHand(t testing.TB, db testdb.Backend, table, name string) {
	t.Helper()
	past := time.Now().UTC().Add(-time.Hour)
	var at any = past
	if db.Dialect != jdbc.Postgres {
		at = past.Format("2006-01-02 15:04:05.000")
	}
	db.Exec(t, `UPDATE `+table+` SET lock_until = ? WHERE name = ?`, at, name)
}

func TestAnExpiredLockIsTakenOverAndCannotBeRenewed(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, db testdb.Backend) {
		modes(t, func(t *testing.T, dbTime bool) {
			table := newTable(t, db)
			a := newRepo(t, db, shedlock.Config{Table: table, UseDBTime: dbTime})
			b := newRepo(t, db, shedlock.Config{Table: table, UseDBTime: dbTime})
			a.Acquire(ctxb, "k", long)
			expireByHand(t, db, table, "k")
			if err := a.Renew(ctxb, "k", long); !errors.Is(err, registry.ErrLockLost) {
				t.Fatalf("Renew of an expired lease = %v, want ErrLockLost", err)
			}
			if _, ok, err := b.Acquire(ctxb, "k", long); !ok || err != nil {
				t.Fatalf("Acquire of an expired lease = %v, %v", ok, err)
			}
			if err := a.Release(ctxb, "k"); !errors.Is(err, registry.ErrLockLost) {
				t.Fatalf("Release of a lease taken over = %v, want ErrLockLost", err)
			}
		})
	})
}

func TestReleaseAfterKeepsTheLockUntilLockAtLeastForAfterAcquisition(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, db testdb.Backend) {
		modes(t, func(t *testing.T, dbTime bool) {
			table := newTable(t, db)
			a := newRepo(t, db, shedlock.Config{Table: table, UseDBTime: dbTime})
			a.Acquire(ctxb, "k", long)
			if err := a.ReleaseAfter(ctxb, "k", 10*time.Minute); err != nil {
				t.Fatal(err)
			}
			wantHeldFor(t, db, table, "k", 10*time.Minute)
			if _, ok, _ := a.Acquire(ctxb, "k", long); ok {
				t.Fatal("the releasing client took its lock again within lockAtLeastFor")
			}
			if err := a.Renew(ctxb, "k", long); !errors.Is(err, registry.ErrLockLost) {
				t.Fatalf("Renew after ReleaseAfter = %v, want ErrLockLost", err)
			}
			if err := a.Release(ctxb, "k"); !errors.Is(err, registry.ErrLockLost) {
				t.Fatalf("Release after ReleaseAfter = %v, want ErrLockLost", err)
			}
			wantHeldFor(t, db, table, "k", 10*time.Minute) // Release left it alone
		})
	})
}

// lockAtLeastFor as long as lockAtMostFor, a common configuration, makes
// the unlock write the lock_until the row has: that is a release, not a
// lost lock (MySQL's driver counts no changed row for it).
func TestReleaseAfterTheWholeLeaseKeepsItAndIsNoError(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, db testdb.Backend) {
		modes(t, func(t *testing.T, dbTime bool) {
			table := newTable(t, db)
			a := newRepo(t, db, shedlock.Config{Table: table, UseDBTime: dbTime})
			if _, ok, err := a.Acquire(ctxb, "k", long); !ok || err != nil {
				t.Fatalf("Acquire = %v, %v", ok, err)
			}
			if err := a.ReleaseAfter(ctxb, "k", long); err != nil {
				t.Fatalf("ReleaseAfter(lockAtMostFor) = %v, want nil", err)
			}
			wantHeldFor(t, db, table, "k", long)
		})
	})
}

func TestReleaseAfterPastLockAtLeastForEndsTheLockNow(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, db testdb.Backend) {
		modes(t, func(t *testing.T, dbTime bool) {
			table := newTable(t, db)
			a := newRepo(t, db, shedlock.Config{Table: table, UseDBTime: dbTime})
			b := newRepo(t, db, shedlock.Config{Table: table, UseDBTime: dbTime})
			a.Acquire(ctxb, "k", long)
			if err := a.ReleaseAfter(ctxb, "k", 0); err != nil {
				t.Fatal(err)
			}
			if _, ok, err := b.Acquire(ctxb, "k", long); !ok || err != nil {
				t.Fatalf("Acquire after a release with lockAtLeastFor 0 = %v, %v", ok, err)
			}
		})
	})
}

func TestRenewIsShedLocksExtend(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, db testdb.Backend) {
		table := newTable(t, db)
		r := newRepo(t, db, shedlock.Config{Table: table, UseDBTime: true})
		if _, ok, _ := r.Acquire(ctxb, "k", time.Minute); !ok {
			t.Fatal("not acquired")
		}
		if err := r.Renew(ctxb, "k", time.Hour); err != nil {
			t.Fatal(err)
		}
		row, _ := readRow(t, db, table, "k")
		if d := time.Duration(row.lockUntil-row.dbNow) * time.Millisecond; d < 50*time.Minute {
			t.Fatalf("the renewed lease ends in %v, want about 1h", d)
		}
	})
}

func TestAcquireAfterCloseFailsWithErrClosed(t *testing.T) {
	db := testdb.SQLite(t)
	r := newRepo(t, db, shedlock.Config{Table: newTable(t, db)})
	r.Close(ctxb)
	if _, _, err := r.Acquire(ctxb, "k", long); !errors.Is(err, registry.ErrClosed) {
		t.Fatalf("Acquire after Close = %v, want ErrClosed", err)
	}
}

func TestCheckReportsAMissingTable(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, db testdb.Backend) {
		r := newRepo(t, db, shedlock.Config{Table: "shedlock_missing"})
		if err := r.Check(ctxb); !errors.Is(err, shedlock.ErrNoTable) {
			t.Fatalf("Check = %v, want ErrNoTable", err)
		}
		if _, _, err := r.Acquire(ctxb, "k", long); !errors.Is(err, shedlock.ErrNoTable) {
			t.Fatalf("Acquire = %v, want ErrNoTable", err)
		}
	})
}

func TestCreateSchemaTwiceLeavesTheTable(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, db testdb.Backend) {
		table := newTable(t, db)
		r := newRepo(t, db, shedlock.Config{Table: table})
		r.Acquire(ctxb, "k", long)
		if err := shedlock.CreateSchema(ctxb, db.DB, shedlock.Config{Table: table}); err != nil {
			t.Fatal(err)
		}
		if _, err := readRow(t, db, table, "k"); err != nil {
			t.Fatalf("the row is gone: %v", err)
		}
	})
}

func TestInvalidConfigAndNamesAreRefused(t *testing.T) {
	db := testdb.SQLite(t)
	for _, cfg := range []shedlock.Config{
		{Table: "shed lock"},
		{Table: "a.b.c"},
		{UseDBTime: true, TimeZone: time.UTC},
		{LockedBy: strings.Repeat("x", 256)},
		{Dialect: "oracle"},
	} {
		if _, err := shedlock.NewRepository(ctxb, db.DB, cfg); !errors.Is(err, shedlock.ErrInvalidConfig) {
			t.Errorf("NewRepository(%+v) = %v, want ErrInvalidConfig", cfg, err)
		}
	}
	r := newRepo(t, db, shedlock.Config{Table: newTable(t, db)})
	for _, name := range []string{"", strings.Repeat("n", 65), "a\x00b"} {
		if _, _, err := r.Acquire(ctxb, name, long); !errors.Is(err, shedlock.ErrInvalidConfig) {
			t.Errorf("Acquire(%q) = %v, want ErrInvalidConfig", name, err)
		}
	}
}

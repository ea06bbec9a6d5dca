package jdbc_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/lockreg/lockreg/internal/testdb"
	"github.com/lockreg/lockreg/jdbc"
	"github.com/lockreg/lockreg/registry"
)

// lockLease is the LOCK_KEY of the clean-up's lease.
var lockLease = jdbc.UUIDKey("lockreg cleanup " + table)

var lockColumns = []string{"LOCK_KEY", "REGION", "CLIENT_ID", "CREATED_DATE", "EXPIRED_AFTER", "FENCE"}

// lockRows returns n rows of keys prefix-0, prefix-1, ... in region that
// expire at expires, acquired an hour before with the token of that time.
func (db testDB) lockRows(prefix, region string, n int, expires time.Time) [][]any {
	rows := make([][]any, n)
	for i := range rows {
		acquired := expires.Add(-time.Hour)
		rows[i] = []any{fmt.Sprintf("%s-%d", prefix, i), region, "some-client", db.At(acquired), db.At(expires), acquired.UnixMicro()}
	}
	return rows
}

func identity(k string) string { return k }

func TestCleanupLeavesOnlyLiveLockRows(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		region, other := randomRegion(), randomRegion()
		now := db.Now(t)
		db.InsertRows(t, table, lockColumns, db.lockRows("dead", region, 5000, now.Add(-2*time.Hour)))
		db.InsertRows(t, table, lockColumns, db.lockRows("recent", region, 300, now.Add(-time.Minute)))
		db.InsertRows(t, table, lockColumns, db.lockRows("held", region, 200, now.Add(time.Hour)))
		db.InsertRows(t, table, lockColumns, db.lockRows("dead", other, 100, now.Add(-2*time.Hour)))

		spy := testdb.NewSpy(db.DB, lockLease)
		repo := newRepoOn(t, spy, jdbc.WithRegion(region), jdbc.WithKeyMapping(identity),
			jdbc.WithCleanup(time.Hour, 20*time.Millisecond))
		for i := range 50 {
			mustAcquire(t, repo, fmt.Sprintf("mine-%d", i), longTTL)
		}
		testdb.WaitFor(t, "the clean-up of the dead rows", func() bool { return db.CountRows(t, table, "LOCK_KEY", region, "dead") == 0 })
		spy.NextPass(t)

		for _, c := range []struct {
			region, prefix string
			want           int
		}{{region, "recent", 300}, {region, "held", 200}, {region, "mine", 50}, {other, "dead", 100}} {
			if n := db.CountRows(t, table, "LOCK_KEY", c.region, c.prefix); n != c.want {
				t.Errorf("%d rows %s-* left in their region; want %d", n, c.prefix, c.want)
			}
		}
		spy.WantBatched(t, table, 5000)
	})
}

func TestCleanupKeepsTokensIncreasing(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		region := randomRegion()
		repo := newRepo(t, db, jdbc.WithRegion(region), jdbc.WithKeyMapping(identity),
			jdbc.WithCleanup(time.Millisecond, 10*time.Millisecond))
		ctx := context.Background()
		first, ok, err := repo.Acquire(ctx, "k", longTTL)
		if err != nil || !ok {
			t.Fatalf("Acquire = %v, %v", ok, err)
		}
		if err := repo.Release(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		testdb.WaitFor(t, "the clean-up of the released row", func() bool {
			_, found := db.Lease(t, table, region, "k")
			return !found
		})
		next, ok, err := repo.Acquire(ctx, "k", longTTL)
		if err != nil || !ok {
			t.Fatalf("Acquire after the clean-up = %v, %v", ok, err)
		}
		if next.Token <= first.Token {
			t.Errorf("the token after the clean-up deleted the row is %d; want more than %d", next.Token, first.Token)
		}
	})
}

// A row whose token ran ahead of the database's clock (the clock stepped
// back) must stay, or the next token, taken from the clock, would be smaller.
func TestCleanupSparesARowWhoseTokenIsAheadOfTheClock(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		region := randomRegion()
		now := db.Now(t)
		ahead := now.Add(time.Hour).UnixMicro()
		db.InsertRows(t, table, lockColumns, db.lockRows("dead", region, 3, now.Add(-2*time.Hour)))
		db.InsertRows(t, table, lockColumns, [][]any{{"ahead", region, "some-client", db.At(now.Add(-2 * time.Hour)),
			db.At(now.Add(-2 * time.Hour)), ahead}})
		spy := testdb.NewSpy(db.DB, lockLease)
		repo := newRepoOn(t, spy, jdbc.WithRegion(region), jdbc.WithKeyMapping(identity),
			jdbc.WithCleanup(time.Minute, 10*time.Millisecond))
		mustAcquire(t, repo, "start", longTTL)
		testdb.WaitFor(t, "the clean-up of the dead rows", func() bool { return db.CountRows(t, table, "LOCK_KEY", region, "dead") == 0 })
		spy.NextPass(t)

		if _, found := db.Lease(t, table, region, "ahead"); !found {
			t.Fatal("the clean-up deleted the row whose token is ahead of the clock")
		}
		lease, ok, err := repo.Acquire(context.Background(), "ahead", longTTL)
		if err != nil || !ok {
			t.Fatalf("Acquire = %v, %v", ok, err)
		}
		if lease.Token <= ahead {
			t.Errorf("token %d; want more than the row's %d", lease.Token, ahead)
		}
	})
}

func TestCleanupSkipsWhileAnotherRepositoryHoldsItsLease(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		region := randomRegion()
		now := db.Now(t)
		leaseKey := lockLease
		db.InsertRows(t, table, lockColumns, db.lockRows("dead", region, 100, now.Add(-2*time.Hour)))
		db.InsertRows(t, table, lockColumns, [][]any{{leaseKey, region, "other-instance", db.At(now), db.At(now.Add(time.Hour)), now.UnixMicro()}})

		spy := testdb.NewSpy(db.DB, leaseKey)
		repo := newRepoOn(t, spy, jdbc.WithRegion(region), jdbc.WithKeyMapping(identity),
			jdbc.WithCleanup(time.Minute, 10*time.Millisecond))
		mustAcquire(t, repo, "start", longTTL)
		testdb.WaitFor(t, "three tries of the clean-up's lease", func() bool { return spy.Tries() >= 3 })
		if d := spy.Deleted(table); len(d) > 0 {
			t.Fatalf("the clean-up deleted rows (%v) while another instance held its lease", d)
		}

		db.Exec(t, `DELETE FROM `+table+` WHERE REGION = ? AND LOCK_KEY = ?`, region, leaseKey)
		testdb.WaitFor(t, "the clean-up once the lease is free", func() bool { return db.CountRows(t, table, "LOCK_KEY", region, "dead") == 0 })
	})
}

func TestRepositoryCloseStopsTheCleanup(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		before := goleak.IgnoreCurrent()
		spy := testdb.NewSpy(db.DB, lockLease)
		repo, err := jdbc.NewLockRepository(context.Background(), spy, jdbc.WithRegion(randomRegion()),
			jdbc.WithCleanup(time.Minute, time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		mustAcquire(t, repo, "k", longTTL)
		testdb.WaitFor(t, "a clean-up pass", func() bool { return spy.Tries() > 0 })
		if err := repo.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		goleak.VerifyNone(t, append(testdb.DriverGoroutines(), before)...)
	})
}

func TestCleanupOptionsMustBePositive(t *testing.T) {
	db := sqliteDB(t) // the options are checked before any I/O
	for name, opt := range map[string]jdbc.Option{
		"WithCleanup(0, 1m)": jdbc.WithCleanup(0, time.Minute),
		"WithCleanup(1h, 0)": jdbc.WithCleanup(time.Hour, 0),
	} {
		if _, err := jdbc.NewLockRepository(context.Background(), db.DB, opt); !errors.Is(err, jdbc.ErrInvalidOption) {
			t.Errorf("NewLockRepository(%s): %v; want ErrInvalidOption", name, err)
		}
	}
}

func TestCleanupDeletesLapsedPlacesInTheQueue(t *testing.T) {
	// PostgreSQL only: the other databases have no waiter queue to clean.
	forEachDBWhere(t, func(db testDB) bool { return db.Dialect == jdbc.Postgres }, func(t *testing.T, db testDB) {
		region := randomRegion()
		now := db.Now(t)
		var rows [][]any
		for i := range 1500 {
			rows = append(rows, []any{fmt.Sprintf("lapsed-%d", i), region, "gone-client", db.At(now.Add(-time.Hour)), db.At(now.Add(-time.Minute)), 1000})
		}
		for i := range 50 {
			rows = append(rows, []any{fmt.Sprintf("waiting-%d", i), region, "some-client", db.At(now), db.At(now.Add(time.Hour)), 1000})
		}
		db.InsertRows(t, "INT_LOCK_WAIT", []string{"LOCK_KEY", "REGION", "CLIENT_ID", "WAITING_SINCE", "WAITING_UNTIL", "LEASE_MICROS"}, rows)

		spy := testdb.NewSpy(db.DB, lockLease)
		repo := newRepoOn(t, spy, jdbc.WithRegion(region), jdbc.WithCleanup(time.Hour, 10*time.Millisecond))
		mustAcquire(t, repo, "start", longTTL)
		testdb.WaitFor(t, "the clean-up of the lapsed places", func() bool {
			return db.CountRows(t, "INT_LOCK_WAIT", "LOCK_KEY", region, "lapsed") == 0
		})
		spy.NextPass(t)
		if n := db.CountRows(t, "INT_LOCK_WAIT", "LOCK_KEY", region, "waiting"); n != 50 {
			t.Errorf("%d live places left; want 50", n)
		}
		spy.WantBatched(t, "INT_LOCK_WAIT", 1500)
	})
}

func TestCleanupReportsFailuresToTheErrorHandler(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		var (
			mu   sync.Mutex
			errs []error
		)
		repo := newRepo(t, db, jdbc.WithPrefix("MISSING_"), jdbc.WithCleanup(time.Hour, 10*time.Millisecond),
			jdbc.WithErrorHandler(func(err error) {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}))
		if _, _, err := repo.Acquire(context.Background(), "k", longTTL); !errors.Is(err, jdbc.ErrNoTable) {
			t.Fatalf("Acquire: %v; want ErrNoTable", err)
		}
		testdb.WaitFor(t, "a clean-up failure", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(errs) > 0
		})
		mu.Lock()
		err := errs[0]
		mu.Unlock()
		if !errors.Is(err, jdbc.ErrNoTable) || !strings.Contains(err.Error(), "MISSING_LOCK") {
			t.Errorf("the clean-up reported %v; want ErrNoTable naming MISSING_LOCK", err)
		}
	})
}

func TestRegistryCloseStopsTheCleanup(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		before := goleak.IgnoreCurrent()
		spy := testdb.NewSpy(db.DB, lockLease)
		repo, err := jdbc.NewLockRepository(context.Background(), spy, jdbc.WithRegion(randomRegion()),
			jdbc.WithCleanup(time.Minute, time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		locks, err := registry.New(repo)
		if err != nil {
			t.Fatal(err)
		}
		l := locks.Obtain("k")
		if err := l.LockContext(context.Background()); err != nil {
			t.Fatal(err)
		}
		testdb.WaitFor(t, "a clean-up pass", func() bool { return spy.Tries() > 0 })
		if err := l.UnlockContext(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := locks.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		goleak.VerifyNone(t, append(testdb.DriverGoroutines(), before)...)
	})
}

func TestWithoutCleanupStartsNoGoroutine(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		before := goleak.IgnoreCurrent()
		repo := newRepo(t, db, jdbc.WithoutCleanup())
		mustAcquire(t, repo, "k", longTTL)
		goleak.VerifyNone(t, append(testdb.DriverGoroutines(), before)...)
	})
}

func TestWithCleanupAfterWithoutCleanupTurnsItOn(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		region := randomRegion()
		db.InsertRows(t, table, lockColumns, db.lockRows("dead", region, 3, db.Now(t).Add(-2*time.Hour)))
		repo := newRepo(t, db, jdbc.WithRegion(region), jdbc.WithoutCleanup(), jdbc.WithCleanup(time.Minute, 10*time.Millisecond))
		mustAcquire(t, repo, "k", longTTL)
		testdb.WaitFor(t, "the clean-up of the dead rows", func() bool { return db.CountRows(t, table, "LOCK_KEY", region, "dead") == 0 })
	})
}

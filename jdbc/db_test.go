package jdbc_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/lockreg/lockreg/internal/testdb"
	"github.com/lockreg/lockreg/jdbc"
)

// testDB is one database backend under test, with the helpers of this
// package's tests.
type testDB struct{ testdb.Backend }

// testDatabases opens the four backends for t (see testdb.Open).
func testDatabases(t testing.TB) []testDB {
	t.Helper()
	var dbs []testDB
	for _, b := range testdb.Open(t) {
		dbs = append(dbs, testDB{b})
	}
	return dbs
}

// forEachDB runs test as a subtest of t for each backend.
func forEachDB(t *testing.T, test func(t *testing.T, db testDB)) {
	t.Helper()
	testdb.ForEach(t, func(t *testing.T, b testdb.Backend) { test(t, testDB{b}) })
}

// forEachDBWhere runs test on each database for which applies is true.
func forEachDBWhere(t *testing.T, applies func(db testDB) bool, test func(t *testing.T, db testDB)) {
	t.Helper()
	testdb.ForEachWhere(t, func(b testdb.Backend) bool { return applies(testDB{b}) },
		func(t *testing.T, b testdb.Backend) { test(t, testDB{b}) })
}

// sqliteDB opens the SQLite backend alone.
func sqliteDB(t testing.TB) testDB { return testDB{testdb.SQLite(t)} }

var (
	randomRegion = testdb.RandomRegion
	openPool     = testdb.OpenPool
)

// sqliteTime is the layout of times in SQLite's lock table.
const sqliteTime = testdb.SQLiteTime

// newRepo returns a repository on db in a random region of its own (a later
// WithRegion in opts wins) and closes it when t ends.
func newRepo(t testing.TB, db testDB, opts ...jdbc.Option) *jdbc.LockRepository {
	t.Helper()
	opts = append([]jdbc.Option{jdbc.WithRegion(randomRegion())}, opts...)
	return newRepoOn(t, db.DB, opts...)
}

// longPlacesRepo is a repository of region with listener l whose waiters
// keep their places in the queue for an hour, for tests that call
// AcquireOrWait and then check what a release does with the place: a place
// lasts WithQueueTTL (default a second) from the start of its queue
// statement, and on a loaded machine a place that lapsed before the release
// is rightly passed over.
func longPlacesRepo(t testing.TB, db testDB, region string, l jdbc.Listener, opts ...jdbc.Option) *jdbc.LockRepository {
	t.Helper()
	return newRepo(t, db, append([]jdbc.Option{jdbc.WithRegion(region), jdbc.WithListener(l), jdbc.WithQueueTTL(longTTL)}, opts...)...)
}

// newRepoOn is newRepo on any jdbc.DB.
func newRepoOn(t testing.TB, db jdbc.DB, opts ...jdbc.Option) *jdbc.LockRepository {
	t.Helper()
	repo, err := jdbc.NewLockRepository(context.Background(), db, opts...)
	if err != nil {
		t.Fatalf("NewLockRepository: %v", err)
	}
	t.Cleanup(func() {
		// Tests that drop the table make Close fail; that is expected.
		if err := repo.Close(context.Background()); err != nil && !errors.Is(err, jdbc.ErrNoTable) {
			t.Errorf("Close: %v", err)
		}
	})
	return repo
}

// connDB is one connection of a pool as a jdbc.DB, for tests that set
// session state such as lock_timeout.
type connDB struct {
	*sql.Conn
	driver driver.Driver
}

func (c connDB) Driver() driver.Driver { return c.driver }

// conn reserves one connection of db's pool until t ends.
func (db testDB) conn(t testing.TB) connDB {
	t.Helper()
	c, err := db.DB.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return connDB{c, db.DB.Driver()}
}

// blockRow makes another transaction hold the row of lockKey (on SQLite:
// the whole database) until the returned function is called; it also
// returns an identifier of the blocking session (a backend pid or connection
// id; 0 on SQLite).
func (db testDB) blockRow(t testing.TB, table, region, lockKey string) (blocker int64, unblock func()) {
	t.Helper()
	ctx := context.Background()
	c := db.conn(t)
	switch db.Dialect {
	case jdbc.SQLite:
		if _, err := c.ExecContext(ctx, `BEGIN IMMEDIATE`); err != nil {
			t.Fatal(err)
		}
		var once sync.Once
		unblock = func() { once.Do(func() { c.ExecContext(ctx, `ROLLBACK`) }) }
		t.Cleanup(unblock)
		return 0, unblock
	case jdbc.Postgres:
		if err := c.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&blocker); err != nil {
			t.Fatal(err)
		}
	case jdbc.MySQL:
		if err := c.QueryRowContext(ctx, `SELECT CONNECTION_ID()`).Scan(&blocker); err != nil {
			t.Fatal(err)
		}
	}
	tx, err := c.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var n int
	err = tx.QueryRowContext(ctx, db.Q(`SELECT 1 FROM `+table+` WHERE REGION = ? AND LOCK_KEY = ? FOR UPDATE`), region, lockKey).Scan(&n)
	if err != nil {
		tx.Rollback()
		t.Fatalf("locking the row: %v", err)
	}
	var once sync.Once
	unblock = func() { once.Do(func() { tx.Rollback() }) }
	t.Cleanup(unblock)
	return blocker, unblock
}

// waitBlocked waits until some session waits for a lock that blocker holds
// (Postgres and MariaDB only).
func (db testDB) waitBlocked(t testing.TB, blocker int64) {
	t.Helper()
	var query string
	switch db.Dialect {
	case jdbc.Postgres:
		query = `SELECT COUNT(*) FROM pg_stat_activity WHERE ? = ANY(pg_blocking_pids(pid))`
	case jdbc.MySQL:
		query = `SELECT COUNT(*) FROM information_schema.INNODB_LOCK_WAITS w
			JOIN information_schema.INNODB_TRX b ON b.trx_id = w.blocking_trx_id
			WHERE b.trx_mysql_thread_id = ?`
	default:
		t.Fatalf("waitBlocked: not on %s", db.Dialect)
	}
	// InnoDB refreshes its information_schema snapshot only when it has not
	// been read for 100 ms, so polling faster would never see the wait.
	interval := 10 * time.Millisecond
	if db.Dialect == jdbc.MySQL {
		interval = 150 * time.Millisecond
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		var n int
		if err := db.DB.QueryRowContext(context.Background(), db.Q(query), blocker).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("nothing got blocked")
		}
		time.Sleep(interval)
	}
}

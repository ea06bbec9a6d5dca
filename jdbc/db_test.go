package jdbc_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	"github.com/google/uuid"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/jmoiron/sqlx"
	_ "github.com/lib/pq"
	_ "modernc.org/sqlite"

	"github.com/lockreg/lockreg/jdbc"
)

// testDB is one database backend under test.
type testDB struct {
	Name    string // postgres-pgx, postgres-pq, mariadb or sqlite
	DB      *sql.DB
	Dialect jdbc.Dialect

	// skip says why DB is nil: its server could not be reached.
	skip string
	// driver and dsn open more pools on the same database.
	driver, dsn string
}

// require skips t when db's server could not be reached.
func (db testDB) require(t testing.TB) {
	t.Helper()
	if db.DB == nil {
		t.Skip(db.skip) // its server is unreachable
	}
}

type backend struct {
	name, driver string
	dialect      jdbc.Dialect
	envVar, def  string // DSN from envVar, or def; "" for SQLite
	server       string // for messages
}

var backends = []backend{
	{"postgres-pgx", "pgx", jdbc.Postgres, "LOCKREG_POSTGRES_DSN", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "postgres"},
	{"postgres-pq", "postgres", jdbc.Postgres, "LOCKREG_POSTGRES_DSN", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "postgres"},
	{"mariadb", "mysql", jdbc.MySQL, "LOCKREG_MYSQL_DSN", "root@tcp(127.0.0.1:3306)/test?parseTime=true", "mariadb"},
	{"sqlite", "sqlite", jdbc.SQLite, "", "", "sqlite"},
}

// sqliteDSN opens file with the pragmas the tests use.
func sqliteDSN(file string, busyTimeoutMS int) string {
	return fmt.Sprintf("file:%s?_pragma=busy_timeout(%d)&_pragma=journal_mode(WAL)", file, busyTimeoutMS)
}

var (
	serverMu    sync.Mutex
	serverState = map[string]*serverInfo{} // by backend name
)

// serverInfo caches, per process, whether a server is reachable and whether
// its schema has been created, so that each is done once per backend.
type serverInfo struct {
	unreachable error
	schemaDone  bool
}

// testDatabases opens the four backends for t: postgres-pgx (pgx/v5
// stdlib), postgres-pq (lib/pq), mariadb (go-sql-driver/mysql) and sqlite
// (modernc, a fresh file in t.TempDir()). The pools are closed when t ends.
// The lock table is created once per server per process, and in every
// SQLite file. A backend whose server cannot be reached fails t when
// CI=true; otherwise its entry has a nil DB and require (or forEachDB) skips
// the subtest that uses it.
func testDatabases(t testing.TB) []testDB {
	t.Helper()
	dbs := make([]testDB, 0, len(backends))
	for _, b := range backends {
		dbs = append(dbs, openBackend(t, b))
	}
	return dbs
}

// forEachDB runs test as a subtest of t for each backend.
func forEachDB(t *testing.T, test func(t *testing.T, db testDB)) {
	t.Helper()
	for _, db := range testDatabases(t) {
		t.Run(db.Name, func(t *testing.T) {
			db.require(t)
			test(t, db)
		})
	}
}

func openBackend(t testing.TB, b backend) testDB {
	t.Helper()
	db := testDB{Name: b.name, Dialect: b.dialect, driver: b.driver}
	if b.dialect == jdbc.SQLite {
		db.dsn = sqliteDSN(filepath.Join(t.TempDir(), "lock.db"), 5000)
		db.DB = openPool(t, db.driver, db.dsn)
		if err := jdbc.CreateSchema(context.Background(), db.DB); err != nil {
			t.Fatalf("%s: CreateSchema: %v", b.name, err)
		}
		return db
	}
	db.dsn = b.def
	if v := os.Getenv(b.envVar); v != "" {
		db.dsn = v
	}

	serverMu.Lock()
	defer serverMu.Unlock()
	info := serverState[b.name]
	if info == nil {
		info = &serverInfo{unreachable: ping(b.driver, db.dsn)}
		serverState[b.name] = info
	}
	if info.unreachable != nil {
		msg := fmt.Sprintf("%s unreachable at %s (set %s): %v", b.server, db.dsn, b.envVar, info.unreachable)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		db.skip = msg
		return db
	}
	db.DB = openPool(t, db.driver, db.dsn)
	if !info.schemaDone {
		if err := jdbc.CreateSchema(context.Background(), db.DB); err != nil {
			t.Fatalf("%s: CreateSchema: %v", b.name, err)
		}
		info.schemaDone = true
	}
	return db
}

func ping(driverName, dsn string) error {
	db, err := sql.Open(driverName, dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return db.PingContext(ctx)
}

func openPool(t testing.TB, driverName, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open(driverName, dsn)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(24)
	t.Cleanup(func() { db.Close() })
	return db
}

// randomRegion returns a region no other test uses.
func randomRegion() string { return "test-" + uuid.NewString() }

// newRepo returns a repository on db in a random region of its own (a later
// WithRegion in opts wins) and closes it when t ends.
func newRepo(t testing.TB, db testDB, opts ...jdbc.Option) *jdbc.LockRepository {
	t.Helper()
	opts = append([]jdbc.Option{jdbc.WithRegion(randomRegion())}, opts...)
	return newRepoOn(t, db.DB, opts...)
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

// q rewrites a test query written with ? placeholders for db's dialect.
func (db testDB) q(query string) string {
	if db.Dialect == jdbc.Postgres {
		return sqlx.Rebind(sqlx.DOLLAR, query)
	}
	return query
}

// exec runs a test statement and fails t on error.
func (db testDB) exec(t testing.TB, query string, args ...any) sql.Result {
	t.Helper()
	res, err := db.DB.ExecContext(context.Background(), db.q(query), args...)
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return res
}

// lease is a row of the lock table as the tests see it.
type lease struct {
	ClientID  string
	Remaining time.Duration // EXPIRED_AFTER minus the database's now
	Created   time.Time     // CREATED_DATE, UTC wall time
}

// leaseOf reads the row of lockKey in region from table, or reports false.
func (db testDB) leaseOf(t testing.TB, table, region, lockKey string) (lease, bool) {
	t.Helper()
	var remaining string
	switch db.Dialect {
	case jdbc.Postgres:
		remaining = `CAST(EXTRACT(EPOCH FROM (EXPIRED_AFTER - timezone('UTC', now()))) * 1000000 AS BIGINT)`
	case jdbc.MySQL:
		remaining = `TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), EXPIRED_AFTER)`
	case jdbc.SQLite:
		remaining = sqliteMillis(`EXPIRED_AFTER`) + ` * 1000 - ` + sqliteMillis(`'now'`) + ` * 1000`
	}
	var (
		l       lease
		micros  int64
		created any
	)
	err := db.DB.QueryRowContext(context.Background(),
		db.q(`SELECT CLIENT_ID, `+remaining+`, CREATED_DATE FROM `+table+` WHERE REGION = ? AND LOCK_KEY = ?`),
		region, lockKey).Scan(&l.ClientID, &micros, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return lease{}, false
	}
	if err != nil {
		t.Fatalf("reading the lease of %s: %v", lockKey, err)
	}
	l.ClientID = strings.TrimRight(l.ClientID, " ")
	l.Remaining = time.Duration(micros) * time.Microsecond
	switch c := created.(type) {
	case time.Time:
		l.Created = c
	case string:
		if l.Created, err = time.Parse(sqliteTime, c); err != nil {
			t.Fatalf("CREATED_DATE %q: %v", c, err)
		}
	default:
		t.Fatalf("CREATED_DATE is a %T", created)
	}
	return l, true
}

// sqliteTime is the layout of times in SQLite's lock table.
const sqliteTime = "2006-01-02 15:04:05.000"

// insertSpringRow writes a row the way Spring Integration's
// DefaultLockRepository does: the application's clock, UTC wall time, bound
// as parameters.
func (db testDB) insertSpringRow(t testing.TB, table, region, lockKey, clientID string, created, expires time.Time) {
	t.Helper()
	var c, e any = created.UTC(), expires.UTC()
	if db.Dialect == jdbc.SQLite {
		c, e = created.UTC().Format(sqliteTime), expires.UTC().Format(sqliteTime)
	}
	db.exec(t, `INSERT INTO `+table+` (REGION, LOCK_KEY, CLIENT_ID, CREATED_DATE, EXPIRED_AFTER) VALUES (?, ?, ?, ?, ?)`,
		region, lockKey, clientID, c, e)
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
	err = tx.QueryRowContext(ctx, db.q(`SELECT 1 FROM `+table+` WHERE REGION = ? AND LOCK_KEY = ? FOR UPDATE`), region, lockKey).Scan(&n)
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
		if err := db.DB.QueryRowContext(context.Background(), db.q(query), blocker).Scan(&n); err != nil {
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

// sqliteMillis is SQLite's time t (a time text or 'now') in milliseconds
// since 1970, exactly: julianday's doubles are off by up to about 40 µs, so
// they are rounded to the millisecond SQLite's times hold.
func sqliteMillis(t string) string {
	return `CAST(ROUND((julianday(` + t + `) - 2440587.5) * 86400000.0) AS INTEGER)`
}

// Package testdb opens the databases lockreg's tests run on: PostgreSQL
// through pgx and lib/pq, MariaDB, and SQLite (modernc.org/sqlite), with
// lockreg's tables created, and Redis; and it reads what the tests check
// there: lease rows and the database's clock. Every package's database
// tests use it, including the fault tests of internal/chaos and the
// multi-process tests of internal/clustertest and leader. It is imported
// by tests only.
//
// The servers are found through LOCKREG_POSTGRES_DSN, LOCKREG_MYSQL_DSN
// (by default a database "test" on 127.0.0.1 with the default ports) and
// LOCKREG_REDIS_ADDR (by default 127.0.0.1:6379); a server that cannot be
// reached fails the test when CI=true and skips it otherwise (see
// Unreachable).
package testdb

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	"github.com/google/uuid"
	_ "github.com/jackc/pgx/v5/stdlib"
	_ "github.com/lib/pq"
	_ "modernc.org/sqlite"

	"github.com/lockreg/lockreg/groupstore/sqlstore"
	"github.com/lockreg/lockreg/jdbc"
)

// Backend is one database under test.
type Backend struct {
	Name    string // postgres-pgx, postgres-pq, mariadb or sqlite
	DB      *sql.DB
	Dialect jdbc.Dialect
	// Driver and DSN open more pools on the same database.
	Driver, DSN string

	// skip says why DB is nil: its server could not be reached.
	skip string
}

// Require skips t when b's server could not be reached (on CI, Open has
// failed the test already).
func (b Backend) Require(t testing.TB) {
	t.Helper()
	if b.DB == nil {
		t.Skip(b.skip) // its server is unreachable
	}
}

type backend struct {
	name, driver string
	dialect      jdbc.Dialect
	envVar, def  string // DSN from envVar, or def; "" for SQLite
	server       string // for messages
}

// backends are the backends in the order Open returns them; their names
// are the Names of the Backends.
var backends = []backend{
	{"postgres-pgx", "pgx", jdbc.Postgres, "LOCKREG_POSTGRES_DSN", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "postgres"},
	{"postgres-pq", "postgres", jdbc.Postgres, "LOCKREG_POSTGRES_DSN", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "postgres"},
	{"mariadb", "mysql", jdbc.MySQL, "LOCKREG_MYSQL_DSN", "root@tcp(127.0.0.1:3306)/test?parseTime=true", "mariadb"},
	{"sqlite", "sqlite", jdbc.SQLite, "", "", "sqlite"},
}

// SQLiteDSN opens file with the pragmas the tests use.
func SQLiteDSN(file string, busyTimeoutMS int) string {
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

// Open opens backends for t: without names the four, postgres-pgx (pgx/v5
// stdlib), postgres-pq (lib/pq), mariadb (go-sql-driver/mysql) and sqlite
// (modernc, a fresh file in t.TempDir()); with names those of these Names,
// in the order given. An unknown name panics: it is a mistake in the test.
// The pools are closed when t ends. The lock and group tables are created
// once per server per process, and in every SQLite file. A backend whose
// server cannot be reached fails t when CI=true; otherwise its entry has a
// nil DB and Require (or ForEach) skips the subtest that uses it.
func Open(t testing.TB, names ...string) []Backend {
	t.Helper()
	if len(names) == 0 {
		for _, b := range backends {
			names = append(names, b.name)
		}
	}
	out := make([]Backend, 0, len(names))
	for _, name := range names {
		i := slices.IndexFunc(backends, func(b backend) bool { return b.name == name })
		if i < 0 {
			panic(fmt.Sprintf("testdb: no backend %q", name))
		}
		out = append(out, open(t, backends[i]))
	}
	return out
}

// Postgres opens PostgreSQL through pgx alone, for the tests that need one
// server, and skips t (fails it when CI=true) if it cannot be reached.
func Postgres(t testing.TB) Backend {
	t.Helper()
	b := Open(t, "postgres-pgx")[0]
	b.Require(t)
	return b
}

// Unreachable fails t with msg when CI=true and skips it otherwise: the
// rule for a test whose server, or what it needs to control the server,
// cannot be reached.
func Unreachable(t testing.TB, msg string) {
	t.Helper()
	if onCI() {
		t.Fatal(msg)
	}
	t.Skip(msg) // the server is unreachable
}

// onCI reports whether the tests run on CI, where nothing may be skipped.
func onCI() bool { return os.Getenv("CI") == "true" }

// ForEach runs test as a subtest of t for each backend.
func ForEach(t *testing.T, test func(t *testing.T, b Backend)) {
	t.Helper()
	for _, b := range Open(t) {
		t.Run(b.Name, func(t *testing.T) {
			b.Require(t)
			test(t, b)
		})
	}
}

// ForEachWhere is ForEach on the backends for which applies is true: a
// test about a feature some databases lack gets no subtest on the others,
// rather than a skipped one.
func ForEachWhere(t *testing.T, applies func(b Backend) bool, test func(t *testing.T, b Backend)) {
	t.Helper()
	for _, b := range Open(t) {
		if !applies(b) {
			continue
		}
		t.Run(b.Name, func(t *testing.T) {
			b.Require(t)
			test(t, b)
		})
	}
}

// SQLite opens the SQLite backend alone, which needs no server.
func SQLite(t testing.TB) Backend {
	t.Helper()
	return Open(t, "sqlite")[0]
}

func open(t testing.TB, b backend) Backend {
	t.Helper()
	db := Backend{Name: b.name, Dialect: b.dialect, Driver: b.driver}
	if b.dialect == jdbc.SQLite {
		db.DSN = SQLiteDSN(filepath.Join(t.TempDir(), "lock.db"), 5000)
		db.DB = OpenPool(t, db.Driver, db.DSN)
		createSchema(t, db)
		return db
	}
	db.DSN = b.def
	if v := os.Getenv(b.envVar); v != "" {
		db.DSN = v
	}

	serverMu.Lock()
	defer serverMu.Unlock()
	info := serverState[b.name]
	if info == nil {
		info = &serverInfo{unreachable: ping(b.driver, db.DSN)}
		serverState[b.name] = info
	}
	if info.unreachable != nil {
		msg := fmt.Sprintf("%s unreachable at %s (set %s): %v", b.server, db.DSN, b.envVar, info.unreachable)
		if onCI() {
			t.Fatal(msg)
		}
		db.skip = msg
		return db
	}
	db.DB = OpenPool(t, db.Driver, db.DSN)
	if !info.schemaDone {
		createSchema(t, db)
		info.schemaDone = true
	}
	return db
}

// createSchema creates lockreg's tables: the lock table and the group
// tables (sqlstore.CreateSchema creates both).
func createSchema(t testing.TB, db Backend) {
	t.Helper()
	if err := sqlstore.CreateSchema(context.Background(), db.DB, sqlstore.Config{}); err != nil {
		t.Fatalf("%s: CreateSchema: %v", db.Name, err)
	}
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

// OpenPool opens a pool of at most 24 connections, closed when t ends.
func OpenPool(t testing.TB, driverName, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open(driverName, dsn)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(24)
	// database/sql keeps 2 idle connections by default: a burst above that
	// closes the rest and opens them again, a new server process each on
	// PostgreSQL, which loaded cores the tests measure nothing of.
	db.SetMaxIdleConns(8)
	db.SetConnMaxIdleTime(time.Second)
	t.Cleanup(func() { db.Close() })
	return db
}

// RandomRegion returns a region no other test uses.
func RandomRegion() string { return "test-" + uuid.NewString() }

package leader_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	"github.com/google/uuid"
	_ "github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite"

	"github.com/lockreg/lockreg/jdbc"
	"github.com/lockreg/lockreg/jdbc/pgxlisten"
	"github.com/lockreg/lockreg/registry"
)

// backend is a database the SQL tests run against: PostgreSQL (pgx, with
// a listener), MariaDB and SQLite, with the DSNs of package jdbc's tests.
type backend struct {
	name, driver string
	dialect      jdbc.Dialect
	envVar, def  string // DSN from envVar, or def; none for SQLite
}

var backends = []backend{
	{"postgres", "pgx", jdbc.Postgres, "LOCKREG_POSTGRES_DSN", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"},
	{"mariadb", "mysql", jdbc.MySQL, "LOCKREG_MYSQL_DSN", "root@tcp(127.0.0.1:3306)/test?parseTime=true"},
	{"sqlite", "sqlite", jdbc.SQLite, "", ""},
}

// testDB is an open backend with the lock table and the tests' tables.
type testDB struct {
	backend
	dsn string
	db  *sql.DB
}

// testTables hold what leaders did, in the database's clock
// (microseconds): their terms, and a counter written only with a fencing
// token greater than the last.
var testTables = []string{
	`CREATE TABLE IF NOT EXISTS leader_term (region VARCHAR(100) NOT NULL, token BIGINT NOT NULL,
		proc INT NOT NULL, started BIGINT NOT NULL, ended BIGINT NOT NULL)`,
	`CREATE TABLE IF NOT EXISTS leader_counter (region VARCHAR(100) NOT NULL PRIMARY KEY,
		n BIGINT NOT NULL, fence BIGINT NOT NULL)`,
}

// forEachDB runs test as a subtest of t for each backend; a server that
// cannot be reached fails the subtest when CI=true and skips it otherwise.
func forEachDB(t *testing.T, test func(t *testing.T, db testDB)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) { test(t, openDB(t, b)) })
	}
}

func openDB(t *testing.T, b backend) testDB {
	t.Helper()
	db := testDB{backend: b, dsn: b.def}
	if b.dialect == jdbc.SQLite {
		db.dsn = fmt.Sprintf("file:%s?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)",
			filepath.Join(t.TempDir(), "leader.db"))
	} else if v := os.Getenv(b.envVar); v != "" {
		db.dsn = v
	}
	var err error
	if db.db, err = sql.Open(b.driver, db.dsn); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.db.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := db.db.PingContext(ctx); err != nil {
		msg := fmt.Sprintf("%s unreachable at %s (set %s): %v", b.name, db.dsn, b.envVar, err)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg) // the server is unreachable
	}
	if err := jdbc.CreateSchema(context.Background(), db.db); err != nil {
		t.Fatalf("%s: CreateSchema: %v", b.name, err)
	}
	for _, s := range testTables {
		if _, err := db.db.Exec(s); err != nil {
			t.Fatalf("%s: %v", b.name, err)
		}
	}
	return db
}

// newRegion returns a region of the lock table no other test uses.
func newRegion(t testing.TB, db testDB) string {
	region := "leader-" + uuid.NewString()[:18]
	t.Cleanup(func() {
		for _, s := range []string{`DELETE FROM INT_LOCK WHERE REGION = ?`, `DELETE FROM leader_term WHERE region = ?`,
			`DELETE FROM leader_counter WHERE region = ?`} {
			db.db.Exec(rebind(db.dialect, s), region)
		}
	})
	return region
}

// newRepository returns a repository on db, one client of region; on
// PostgreSQL it listens for releases. The registry that owns it closes it.
func newRepository(db *sql.DB, d jdbc.Dialect, region string) (registry.Repository, error) {
	opts := []jdbc.Option{jdbc.WithRegion(region), jdbc.WithErrorHandler(func(error) {})}
	if d == jdbc.Postgres {
		opts = append(opts, jdbc.WithListener(pgxlisten.New(db)))
	}
	return jdbc.NewLockRepository(context.Background(), db, opts...)
}

// rebind rewrites ? placeholders for d.
func rebind(d jdbc.Dialect, query string) string {
	if d != jdbc.Postgres {
		return query
	}
	var b strings.Builder
	n := 0
	for _, r := range query {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// columnMicros is an expression for a UTC wall-time column of the lock
// table in microseconds since 1970, on the scale of jdbc's tokens.
func columnMicros(d jdbc.Dialect, col string) string {
	switch d {
	case jdbc.Postgres:
		return `CAST(EXTRACT(EPOCH FROM ` + col + `) * 1000000 AS BIGINT)`
	case jdbc.MySQL:
		return `TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', ` + col + `)`
	default:
		return `CAST(ROUND((julianday(` + col + `) - 2440587.5) * 86400000.0) AS INTEGER) * 1000`
	}
}

// nowMicros is an expression for the database's clock in microseconds
// since 1970.
func nowMicros(d jdbc.Dialect) string {
	switch d {
	case jdbc.Postgres:
		return `CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000000 AS BIGINT)`
	case jdbc.MySQL:
		return `TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))`
	default:
		return `CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000`
	}
}

// leaseRow is the row of role in region's lock table.
type leaseRow struct {
	client  string
	expires int64 // EXPIRED_AFTER in microseconds
	fence   int64
}

func readLease(t testing.TB, db testDB, region, role string) leaseRow {
	t.Helper()
	var r leaseRow
	err := db.db.QueryRow(rebind(db.dialect, `SELECT CLIENT_ID, `+columnMicros(db.dialect, "EXPIRED_AFTER")+
		`, FENCE FROM INT_LOCK WHERE REGION = ? AND LOCK_KEY = ?`), region, jdbc.UUIDKey(role)).
		Scan(&r.client, &r.expires, &r.fence)
	if err != nil {
		t.Fatalf("reading the lease of %q: %v", role, err)
	}
	r.client = strings.TrimRight(r.client, " ")
	return r
}

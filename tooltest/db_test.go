package tooltest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
	_ "github.com/lib/pq"
	_ "modernc.org/sqlite"

	"github.com/lockreg/lockreg/groupstore"
	"github.com/lockreg/lockreg/groupstore/sqlstore"
	"github.com/lockreg/lockreg/jdbc"
	"github.com/lockreg/lockreg/scheduler"
)

// server is a database backend the tools are tried on.
type server struct {
	name    string // postgres, mariadb, sqlite
	dialect jdbc.Dialect
	envVar  string // the DSN's variable, as in lockreg's own tests
	def     string // its default
}

var servers = []server{
	{"postgres", jdbc.Postgres, "LOCKREG_POSTGRES_DSN", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"},
	{"mariadb", jdbc.MySQL, "LOCKREG_MYSQL_DSN", "root@tcp(127.0.0.1:3306)/test?parseTime=true"},
	{"sqlite", jdbc.SQLite, "", ""},
}

// forEachServer runs test as a subtest of t per backend.
func forEachServer(t *testing.T, test func(t *testing.T, s server)) {
	forEachServerWhere(t, func(server) bool { return true }, test)
}

// forEachServerWhere is forEachServer on the servers for which applies is
// true: a test of what some databases lack gets no subtest on the others.
func forEachServerWhere(t *testing.T, applies func(s server) bool, test func(t *testing.T, s server)) {
	for _, s := range servers {
		if applies(s) {
			t.Run(s.name, func(t *testing.T) { test(t, s) })
		}
	}
}

// freshDB is a database created for one test and dropped after it.
type freshDB struct {
	server
	driver, dsn string
	// path is the SQLite file, "" on a server.
	path string
}

// fresh creates an empty database on s, reachable through the returned
// freshDB until t ends. A server that cannot be reached fails t when
// CI=true and skips it otherwise.
func fresh(t *testing.T, s server) freshDB {
	t.Helper()
	f := freshDB{server: s}
	if s.dialect == jdbc.SQLite {
		f.driver, f.path = "sqlite", filepath.Join(t.TempDir(), "tool.db")
		f.dsn = "file:" + f.path + "?_pragma=busy_timeout(5000)"
		return f
	}
	base := os.Getenv(s.envVar)
	if base == "" {
		base = s.def
	}
	name := "lockreg_tt_" + randomHex(6)
	admin := base // CREATE DATABASE runs on the database base names
	f.driver = "pgx"
	if s.dialect == jdbc.MySQL {
		f.driver = "mysql"
	}
	a, err := sql.Open(f.driver, admin)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.PingContext(ctx); err != nil {
		msg := fmt.Sprintf("%s unreachable at %s (set %s): %v", s.name, base, s.envVar, err)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg) // the server is unreachable, and this is not CI
	}
	if _, err := a.ExecContext(ctx, `CREATE DATABASE `+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		a, err := sql.Open(f.driver, admin)
		if err != nil {
			t.Error(err)
			return
		}
		defer a.Close()
		drop := `DROP DATABASE ` + name
		if s.dialect == jdbc.Postgres {
			drop += ` WITH (FORCE)`
		}
		if _, err := a.Exec(drop); err != nil {
			t.Errorf("dropping the test database: %v", err)
		}
	})
	f.dsn = f.withDatabase(base, name)
	return f
}

// withDatabase returns base with its database replaced by name.
func (f freshDB) withDatabase(base, name string) string {
	if f.dialect == jdbc.MySQL {
		cfg, err := mysql.ParseDSN(base)
		if err != nil {
			panic(err)
		}
		cfg.DBName = name
		return cfg.FormatDSN()
	}
	u, err := url.Parse(base)
	if err != nil {
		panic(err)
	}
	u.Path = "/" + name
	return u.String()
}

// open opens a pool on f with driverName ("" for f's default) and extra
// DSN parameters (MySQL: multiStatements=true); it is closed when t ends.
func (f freshDB) open(t *testing.T, driverName string, params ...string) *sql.DB {
	t.Helper()
	if driverName == "" {
		driverName = f.driver
	}
	dsn := f.dsn
	for _, p := range params {
		sep := "?"
		if strings.Contains(dsn, "?") {
			sep = "&"
		}
		dsn += sep + p
	}
	db, err := sql.Open(driverName, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// execAll runs statements on db and fails t on error.
func execAll(t *testing.T, db *sql.DB, statements ...string) {
	t.Helper()
	for _, s := range statements {
		if _, err := db.Exec(s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

// tables lists the tables of db's database in lower case, without the
// migration tools' own.
func tables(t *testing.T, f freshDB, db *sql.DB) []string {
	t.Helper()
	q := map[jdbc.Dialect]string{
		jdbc.Postgres: `SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()`,
		jdbc.MySQL:    `SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE()`,
		jdbc.SQLite:   `SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'`,
	}[f.dialect]
	var out []string
	for _, n := range strings1(t, db, q) {
		if n = strings.ToLower(n); n != "goose_db_version" && n != "schema_migrations" {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// columns lists the columns of table in lower case, in table order.
func columns(t *testing.T, f freshDB, db *sql.DB, table string) []string {
	t.Helper()
	var q string
	switch f.dialect {
	case jdbc.Postgres:
		q = `SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = '` + strings.ToLower(table) + `' ORDER BY ordinal_position`
	case jdbc.MySQL:
		q = `SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = '` + table + `' ORDER BY ORDINAL_POSITION`
	default:
		q = `SELECT name FROM pragma_table_info('` + table + `') ORDER BY cid`
	}
	out := strings1(t, db, q)
	for i := range out {
		out[i] = strings.ToLower(out[i])
	}
	return out
}

func strings1(t *testing.T, db *sql.DB, query string) []string {
	t.Helper()
	rows, err := db.Query(query)
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// springLockDDL is Spring Integration 7's CREATE TABLE for INT_LOCK
// (schema-postgresql.sql, schema-mysql.sql; SQLite, which Spring has no
// script for, takes the H2/PostgreSQL one).
func springLockDDL(d jdbc.Dialect) string {
	if d == jdbc.MySQL {
		return `CREATE TABLE INT_LOCK (LOCK_KEY CHAR(36) NOT NULL, REGION VARCHAR(100) NOT NULL, CLIENT_ID CHAR(36), ` +
			`CREATED_DATE DATETIME(6) NOT NULL, EXPIRED_AFTER DATETIME(6) NOT NULL, ` +
			`constraint INT_LOCK_PK primary key (LOCK_KEY, REGION)) ENGINE=InnoDB`
	}
	return `CREATE TABLE INT_LOCK (LOCK_KEY CHAR(36) NOT NULL, REGION VARCHAR(100) NOT NULL, CLIENT_ID CHAR(36), ` +
		`CREATED_DATE TIMESTAMP NOT NULL, EXPIRED_AFTER TIMESTAMP NOT NULL, ` +
		`constraint INT_LOCK_PK primary key (LOCK_KEY, REGION))`
}

var springColumns = []string{"lock_key", "region", "client_id", "created_date", "expired_after"}

// springTable creates Spring Integration 7's INT_LOCK on db with a row that
// a Spring client holds for an hour, written as Spring writes it.
func springTable(t *testing.T, f freshDB, db *sql.DB) {
	t.Helper()
	execAll(t, db, springLockDDL(f.dialect))
	insertSpringRow(t, f, db, "spring-key")
}

// insertSpringRow inserts with Spring's INSERT, which names no FENCE.
func insertSpringRow(t *testing.T, f freshDB, db *sql.DB, key string) {
	t.Helper()
	now := time.Now().UTC()
	var c, e any = now, now.Add(time.Hour)
	if f.dialect == jdbc.SQLite {
		c, e = now.Format("2006-01-02 15:04:05.000"), now.Add(time.Hour).Format("2006-01-02 15:04:05.000")
	}
	q := `INSERT INTO INT_LOCK (REGION, LOCK_KEY, CLIENT_ID, CREATED_DATE, EXPIRED_AFTER) VALUES (?, ?, ?, ?, ?)`
	if f.dialect == jdbc.Postgres {
		q = `INSERT INTO INT_LOCK (REGION, LOCK_KEY, CLIENT_ID, CREATED_DATE, EXPIRED_AFTER) VALUES ($1, $2, $3, $4, $5)`
	}
	if _, err := db.Exec(q, "DEFAULT", jdbc.UUIDKey(key), "a-spring-client", c, e); err != nil {
		t.Fatalf("Spring's insert: %v", err)
	}
}

// springRows counts the rows of the Spring client.
func springRows(t *testing.T, db *sql.DB) int {
	t.Helper()
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM INT_LOCK WHERE CLIENT_ID = 'a-spring-client'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// lockregTables are the tables the up scripts leave, per dialect.
func lockregTables(d jdbc.Dialect) []string {
	if d == jdbc.Postgres {
		return []string{"int_group", "int_group_message", "int_lock", "int_lock_wait", "scheduled_tasks"}
	}
	return []string{"int_group", "int_group_message", "int_lock", "scheduled_tasks"}
}

// wantLockregWorks checks that the schema is complete for lockreg: the
// lock table passes NewLockRepository and Check, a lock can be taken (on
// PostgreSQL through the wait queue) and the group tables are there; a
// Spring client's held key is respected.
func wantLockregWorks(t *testing.T, f freshDB, db *sql.DB) {
	t.Helper()
	ctx := context.Background()
	if got, want := tables(t, f, db), lockregTables(f.dialect); !slices.Equal(got, want) {
		t.Fatalf("tables %v, want %v", got, want)
	}
	repo, err := jdbc.NewLockRepository(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer repo.Close(ctx)
	if err := repo.Check(ctx); err != nil {
		t.Fatal(err)
	}
	key := "k-" + randomHex(4)
	if _, ok, err := repo.Acquire(ctx, key, time.Minute); !ok || err != nil {
		t.Fatalf("Acquire: %v, %v", ok, err)
	}
	// 000004's readable columns: the key as written and the holder.
	var name, holder string
	q := `SELECT LOCK_NAME, HOLDER FROM INT_LOCK WHERE LOCK_KEY = ?`
	if f.dialect == jdbc.Postgres {
		q = `SELECT LOCK_NAME, HOLDER FROM INT_LOCK WHERE LOCK_KEY = $1`
	}
	if err := db.QueryRowContext(ctx, q, jdbc.UUIDKey(key)).Scan(&name, &holder); err != nil {
		t.Fatal(err)
	}
	if name != key || holder != repo.Holder() {
		t.Fatalf("LOCK_NAME %q, HOLDER %q; want %q, %q", name, holder, key, repo.Holder())
	}
	if err := repo.Release(ctx, key); err != nil {
		t.Fatal(err)
	}
	// 000007: db-scheduler's table, as package scheduler reads and writes it.
	sc, err := scheduler.NewClient(db, scheduler.Config{})
	if err != nil {
		t.Fatal(err)
	}
	id := "i-" + randomHex(4)
	if err := sc.Schedule(ctx, scheduler.Instance{Task: "tooltest", ID: id, Data: 1}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if e, err := sc.Get(ctx, "tooltest", id); err != nil || string(e.Data) != "1" {
		t.Fatalf("scheduler Get: %v, %+v", err, e)
	}
	if f.dialect == jdbc.Postgres {
		wantProbeSummary(t, db)
	}
	if springRows(t, db) > 0 {
		if _, ok, err := repo.Acquire(ctx, "spring-key", time.Minute); ok || err != nil {
			t.Fatalf("Acquire of the key Spring holds: %v, %v; want false, nil", ok, err)
		}
	}
}

// wantProbeSummary checks postgres/000008: the resequencer's probing Add
// keeps its summary in the group's row.
func wantProbeSummary(t *testing.T, db *sql.DB) {
	t.Helper()
	ctx := context.Background()
	region := "r-" + randomHex(4)
	s, err := sqlstore.New(db, sqlstore.Config{Region: region, DisableCleanup: true})
	if err != nil {
		t.Fatal(err)
	}
	p := groupstore.Probe{UniqueKey: "n", Unique: 1, SameKey: "size", Same: 2}
	msg := groupstore.Message{UUID: "m1", Metadata: map[string]string{"n": "1", "size": "2"}}
	if _, _, fits, err := s.AddProbe(ctx, "g", msg, 0, p); err != nil || !fits {
		t.Fatalf("AddProbe: fits %v, %v", fits, err)
	}
	var kept bool
	err = db.QueryRowContext(ctx, `SELECT PROBE_VERSION = VERSION FROM INT_GROUP WHERE REGION = $1`, region).Scan(&kept)
	if err != nil || !kept {
		t.Fatalf("the group's probe summary: kept %v, %v", kept, err)
	}
}

//go:build chaos

package chaos

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	"github.com/google/uuid"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/jmoiron/sqlx"
	_ "modernc.org/sqlite"

	"github.com/lockreg/lockreg/jdbc"
	"github.com/lockreg/lockreg/jdbc/pgxlisten"
	"github.com/lockreg/lockreg/registry"
)

// backend is a database the tests run against.
type backend struct {
	name    string // postgres, mariadb or sqlite
	driver  string // database/sql driver name
	dialect jdbc.Dialect
	dsn     string // for SQLite, set per test by sqliteBackend
	envVar  string // where the DSN may be overridden
	// stop and start are shell commands that stop and start the server
	// (restart tests only), overridable through the named variables.
	stopEnv, startEnv string
	stopCmd, startCmd string
}

var (
	postgres = backend{
		name: "postgres", driver: "pgx", dialect: jdbc.Postgres,
		dsn: "postgres://postgres@127.0.0.1:5432/test?sslmode=disable", envVar: "LOCKREG_POSTGRES_DSN",
		stopEnv: "LOCKREG_CHAOS_POSTGRES_STOP", startEnv: "LOCKREG_CHAOS_POSTGRES_START",
		stopCmd:  "pg_ctlcluster --skip-systemctl-redirect 15 main stop -m fast",
		startCmd: "pg_ctlcluster --skip-systemctl-redirect 15 main start",
	}
	mariadb = backend{
		name: "mariadb", driver: "mysql", dialect: jdbc.MySQL,
		dsn: "root@tcp(127.0.0.1:3306)/test?parseTime=true", envVar: "LOCKREG_MYSQL_DSN",
		stopEnv: "LOCKREG_CHAOS_MYSQL_STOP", startEnv: "LOCKREG_CHAOS_MYSQL_START",
		stopCmd:  "mariadb-admin -uroot -h127.0.0.1 shutdown",
		startCmd: "start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd",
	}
)

// serverBackends are the backends with a server; sqliteBackend makes the
// file-based one.
func serverBackends() []backend { return []backend{postgres, mariadb} }

// resolve applies the DSN override of the environment.
func (b backend) resolve() backend {
	if v := os.Getenv(b.envVar); b.envVar != "" && v != "" {
		b.dsn = v
	}
	return b
}

// sqliteBackend is SQLite in a fresh file of t's: several processes may
// open it, in WAL mode, waiting up to 5 s for each other's writes.
func sqliteBackend(t testing.TB) backend {
	file := filepath.Join(t.TempDir(), "chaos.db")
	return backend{name: "sqlite", driver: "sqlite", dialect: jdbc.SQLite,
		dsn: fmt.Sprintf("file:%s?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)", file)}
}

// allBackends returns PostgreSQL, MariaDB and SQLite (a fresh file of t's).
func allBackends(t testing.TB) []backend {
	return append(serverBackends(), sqliteBackend(t))
}

var (
	schemaMu   sync.Mutex
	schemaDone = map[string]bool{}
)

// open opens b for t, creating the lock table and the tests' tables once,
// and closes the pool when t ends. A server that cannot be reached fails
// t when CI=true and skips it otherwise.
func (b backend) open(t testing.TB) *sqlx.DB {
	t.Helper()
	b = b.resolve()
	db, err := sqlx.Open(b.driver, b.dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := pingUntil(db.DB, 5*time.Second); err != nil {
		unreachable(t, fmt.Sprintf("%s unreachable at %s (set %s): %v", b.name, b.dsn, b.envVar, err))
	}
	schemaMu.Lock()
	defer schemaMu.Unlock()
	if !schemaDone[b.dsn] {
		if err := jdbc.CreateSchema(context.Background(), db); err != nil {
			t.Fatalf("%s: CreateSchema: %v", b.name, err)
		}
		for _, s := range testTables {
			if _, err := db.Exec(s); err != nil {
				t.Fatalf("%s: %s: %v", b.name, s, err)
			}
		}
		schemaDone[b.dsn] = true
	}
	return db
}

// unreachable fails t on CI and skips it elsewhere.
func unreachable(t testing.TB, msg string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg) // the server is unreachable
}

// testTables are the guarded data of the tests: a counter per key, written
// only with a fencing token greater than the last one, and the holding
// intervals the holders recorded, in the database's clock (microseconds).
var testTables = []string{
	`CREATE TABLE IF NOT EXISTS chaos_counter (run VARCHAR(64) NOT NULL, k VARCHAR(64) NOT NULL,
		n BIGINT NOT NULL, fence BIGINT NOT NULL, PRIMARY KEY (run, k))`,
	`CREATE TABLE IF NOT EXISTS chaos_interval (run VARCHAR(64) NOT NULL, k VARCHAR(64) NOT NULL,
		token BIGINT NOT NULL, proc INT NOT NULL, acquired BIGINT NOT NULL, released BIGINT NOT NULL)`,
}

// pingUntil pings db until it answers or d has passed.
func pingUntil(db *sql.DB, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := db.PingContext(ctx)
		cancel()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// nowMicros is an expression for the database's clock in microseconds
// since 1970 (UTC). On SQLite it has millisecond resolution.
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

// columnMicros is an expression for a UTC wall-time column of the lock
// table in microseconds since 1970.
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

// dbNow reads the database's clock in microseconds.
func dbNow(ctx context.Context, db *sqlx.DB, d jdbc.Dialect) (int64, error) {
	var n int64
	err := db.QueryRowContext(ctx, `SELECT `+nowMicros(d)).Scan(&n)
	return n, err
}

// row is a lease row of the lock table.
type row struct {
	clientID string
	expires  int64 // EXPIRED_AFTER, microseconds since 1970 UTC
	fence    int64
}

// leaseRow reads the row of key in region (default prefix, default key
// mapping).
func leaseRow(t testing.TB, db *sqlx.DB, d jdbc.Dialect, region, key string) row {
	t.Helper()
	var r row
	err := db.QueryRowContext(context.Background(), db.Rebind(`SELECT CLIENT_ID, `+columnMicros(d, "EXPIRED_AFTER")+
		`, FENCE FROM INT_LOCK WHERE REGION = ? AND LOCK_KEY = ?`), region, jdbc.UUIDKey(key)).Scan(&r.clientID, &r.expires, &r.fence)
	if err != nil {
		t.Fatalf("reading the lease of %q: %v", key, err)
	}
	r.clientID = strings.TrimRight(r.clientID, " ")
	return r
}

// newRun returns an identifier for one test's rows: its region and the
// run column of the test tables.
func newRun() string { return "chaos-" + uuid.NewString()[:18] }

// newRegistry returns a registry on db in region with its own repository
// (one client), closing it when t ends. On PostgreSQL with pgx it listens
// for releases.
func newRegistry(t testing.TB, db *sqlx.DB, d jdbc.Dialect, region string, opts ...registry.Option) *registry.Registry {
	t.Helper()
	repoOpts := []jdbc.Option{jdbc.WithRegion(region), jdbc.WithErrorHandler(func(error) {})}
	if d == jdbc.Postgres {
		repoOpts = append(repoOpts, jdbc.WithListener(pgxlisten.New(db.DB)))
	}
	repo, err := jdbc.NewLockRepository(context.Background(), db, repoOpts...)
	if err != nil {
		t.Fatal(err)
	}
	opts = append([]registry.Option{registry.WithErrorHandler(func(string, error) {})}, opts...)
	reg, err := registry.New(repo, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		reg.Close(ctx)
	})
	return reg
}

// seedCounters creates the counter rows of keys for run.
func seedCounters(t testing.TB, db *sqlx.DB, run string, keys []string) {
	t.Helper()
	for _, k := range keys {
		if _, err := db.Exec(db.Rebind(`INSERT INTO chaos_counter (run, k, n, fence) VALUES (?, ?, 0, 0)`), run, k); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		db.Exec(db.Rebind(`DELETE FROM chaos_counter WHERE run = ?`), run)
		db.Exec(db.Rebind(`DELETE FROM chaos_interval WHERE run = ?`), run)
	})
}

// counter reads the counter of key in run.
func counter(t testing.TB, db *sqlx.DB, run, key string) (n, fence int64) {
	t.Helper()
	if err := db.QueryRow(db.Rebind(`SELECT n, fence FROM chaos_counter WHERE run = ? AND k = ?`), run, key).Scan(&n, &fence); err != nil {
		t.Fatal(err)
	}
	return n, fence
}

// errRefused reports a guarded write refused because a greater token had
// written.
var errRefused = errors.New("write refused: a greater fencing token has written")

// incrementFenced is the critical section of the tests: it reads key's
// counter and writes it back plus one, guarded by token. It returns
// errRefused if a holder with a greater token has written since. A write
// that committed although its result was lost (a dropped connection) is
// recognised on retry by the fence equal to token.
func incrementFenced(ctx context.Context, db *sqlx.DB, run, key string, token int64) error {
	var n, fence int64
	if err := db.QueryRowContext(ctx, db.Rebind(`SELECT n, fence FROM chaos_counter WHERE run = ? AND k = ?`), run, key).Scan(&n, &fence); err != nil {
		return err
	}
	if fence == token {
		return nil // this hold's write committed before
	}
	res, err := db.ExecContext(ctx, db.Rebind(`UPDATE chaos_counter SET n = ?, fence = ? WHERE run = ? AND k = ? AND fence < ?`),
		n+1, token, run, key, token)
	if err != nil {
		return err
	}
	if a, err := res.RowsAffected(); err != nil {
		return err
	} else if a != 1 {
		return fmt.Errorf("%w (token %d, key %q)", errRefused, token, key)
	}
	return nil
}

// serverControl returns the commands that stop and start b's server, or
// skips t (fails it on CI) when they are not available.
func (b backend) serverControl(t testing.TB) (stop, start string) {
	t.Helper()
	stop, start = b.stopCmd, b.startCmd
	if v := os.Getenv(b.stopEnv); v != "" {
		stop = v
	}
	if v := os.Getenv(b.startEnv); v != "" {
		start = v
	}
	for _, c := range []string{stop, start} {
		if _, err := exec.LookPath(strings.Fields(c)[0]); err != nil {
			unreachable(t, fmt.Sprintf("%s server control unreachable: %q: %v (set %s and %s)", b.name, c, err, b.stopEnv, b.startEnv))
		}
	}
	return stop, start
}

// shell runs a server-control command.
func shell(command string) error {
	out, err := exec.Command("sh", "-c", command).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", command, err, out)
	}
	return nil
}

// ensureUp starts b's server unless it answers, and waits until it does.
func (b backend) ensureUp(t testing.TB, start string) {
	t.Helper()
	b = b.resolve()
	db, err := sql.Open(b.driver, b.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if pingUntil(db, 0) == nil {
		return
	}
	if err := shell(start); err != nil {
		t.Errorf("starting %s: %v", b.name, err)
	}
	if err := pingUntil(db, 60*time.Second); err != nil {
		t.Errorf("%s does not answer after start: %v", b.name, err)
	}
}

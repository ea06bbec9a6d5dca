package main

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"cirello.io/pglock"
	_ "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	_ "github.com/lib/pq"
	_ "modernc.org/sqlite"

	"github.com/lockreg/lockreg/groupstore/sqlstore"
	"github.com/lockreg/lockreg/jdbc"
)

// env holds the databases of one run.
type env struct {
	pgDSN     string  // the benchmark's PostgreSQL database
	pgDB      string  // its name
	pgAdmin   *sql.DB // on the configured DSN's database: reads statistics
	pgErr     error   // why PostgreSQL is unusable
	myDSN     string
	myAdmin   *sql.DB
	myErr     error
	sqliteDir string
	sqliteDSN string
	sqliteErr error
	redis     *redisEnv // see redis.go

	ownPG      *ownPostgres // -own-postgres; nil otherwise
	syncCommit string       // -synchronous-commit: the benchmark database's setting, "" = the server's
	pgss       bool         // pg_stat_statements is loaded: server time per statement
	pgssErr    error        // why not

	verbose bool
	// lockGroupCommit is jdbc.WithGroupCommit of the lockreg contestants
	// (-lock-group-commit; 0: the repository's default).
	lockGroupCommit int
	logMu           sync.Mutex
	logged          map[string]int
}

// logf reports an error of a contestant to stderr, at most a few times per
// message prefix so that a failing contestant does not flood the output.
func (e *env) logf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	e.logMu.Lock()
	defer e.logMu.Unlock()
	k := msg
	if len(k) > 40 {
		k = k[:40]
	}
	e.logged[k]++
	if e.logged[k] <= 3 || e.verbose {
		fmt.Fprintln(os.Stderr, "bench:", msg)
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// withDatabase returns dsn naming database db instead (URL DSNs only).
func withDatabase(dsn, db string) (string, bool) {
	u, err := url.Parse(dsn)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return dsn, false
	}
	u.Path = "/" + db
	return u.String(), true
}

func openEnv(ctx context.Context, cfg config) *env {
	e := &env{logged: map[string]int{}, verbose: cfg.verbose, lockGroupCommit: cfg.lockGroupCommit}
	e.syncCommit = cfg.syncCommit
	e.setupPostgres(ctx, cfg)
	e.setupMariaDB(ctx, cfg)
	e.setupSQLite(ctx)
	e.setupRedis(ctx)
	return e
}

func (e *env) close() {
	if e.pgAdmin != nil {
		e.pgAdmin.Close()
	}
	if e.myAdmin != nil {
		e.myAdmin.Close()
	}
	if e.sqliteDir != "" {
		os.RemoveAll(e.sqliteDir)
	}
	e.redis.close()
	e.ownPG.stop()
}

func ping(ctx context.Context, db *sql.DB) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	return db.PingContext(ctx)
}

func (e *env) setupPostgres(ctx context.Context, cfg config) {
	dsn := envOr("LOCKREG_POSTGRES_DSN", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	if cfg.ownPostgres > 0 {
		p, d, err := startOwnPostgres(ctx, cfg.ownPostgres)
		if err != nil {
			e.pgErr = err
			return
		}
		e.ownPG, dsn = p, d
	}
	pc, err := pgx.ParseConfig(dsn)
	if err != nil {
		e.pgErr = err
		return
	}
	admin := stdlib.OpenDB(*pc)
	admin.SetMaxOpenConns(2)
	if err := ping(ctx, admin); err != nil {
		admin.Close()
		e.pgErr = fmt.Errorf("PostgreSQL unreachable at %s (set LOCKREG_POSTGRES_DSN): %w", dsn, err)
		return
	}
	e.pgAdmin, e.pgDSN, e.pgDB = admin, dsn, pc.Database
	if cfg.pgDB != "" && cfg.pgDB != pc.Database {
		if d, ok := withDatabase(dsn, cfg.pgDB); ok {
			var exists bool
			err := admin.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, cfg.pgDB).Scan(&exists)
			if err == nil && !exists {
				_, err = admin.ExecContext(ctx, `CREATE DATABASE `+pgx.Identifier{cfg.pgDB}.Sanitize())
			}
			if err != nil {
				e.pgErr = fmt.Errorf("creating database %s: %w", cfg.pgDB, err)
				return
			}
			e.pgDSN, e.pgDB = d, cfg.pgDB
		}
	}
	if err := e.setupDatabaseSettings(ctx); err != nil {
		e.pgErr = err
		return
	}
	db, _, err := openPgx(e.pgDSN, 1)
	if err != nil {
		e.pgErr = err
		return
	}
	defer db.Close()
	// lockreg's prefix also gets the group tables, for the group scenarios.
	if err := sqlstore.CreateSchema(ctx, db, sqlstore.Config{Prefix: lockregPrefix}); err != nil {
		e.pgErr = fmt.Errorf("creating %sLOCK and %sGROUP: %w", lockregPrefix, lockregPrefix, err)
		return
	}
	if err := jdbc.CreateSchema(ctx, db, jdbc.WithPrefix(springPrefix)); err != nil {
		e.pgErr = fmt.Errorf("creating %sLOCK: %w", springPrefix, err)
		return
	}
	_, err = db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+shedlockTable+` (name VARCHAR(64) NOT NULL PRIMARY KEY, `+
		`lock_until TIMESTAMP NOT NULL, locked_at TIMESTAMP NOT NULL, locked_by VARCHAR(255) NOT NULL)`)
	if err != nil {
		e.pgErr = fmt.Errorf("creating %s: %w", shedlockTable, err)
		return
	}
	cl, err := pglock.UnsafeNew(db, pglockOptions()...)
	if err == nil {
		err = cl.TryCreateTable()
	}
	if err != nil {
		e.pgErr = fmt.Errorf("creating %s: %w", pglockTable, err)
	}
}

func (e *env) setupMariaDB(ctx context.Context, cfg config) {
	dsn := envOr("LOCKREG_MYSQL_DSN", "root@tcp(127.0.0.1:3306)/test?parseTime=true")
	db, err := sql.Open("mysql", dsn)
	if err == nil {
		err = ping(ctx, db)
	}
	if err != nil {
		if db != nil {
			db.Close()
		}
		e.myErr = fmt.Errorf("MariaDB unreachable at %s (set LOCKREG_MYSQL_DSN): %w", dsn, err)
		return
	}
	db.SetMaxOpenConns(2)
	// lockreg's prefix also gets the group tables, for the group scenarios.
	if err := sqlstore.CreateSchema(ctx, db, sqlstore.Config{Prefix: lockregPrefix}); err != nil {
		db.Close()
		e.myErr = fmt.Errorf("creating %sLOCK and %sGROUP: %w", lockregPrefix, lockregPrefix, err)
		return
	}
	e.myAdmin, e.myDSN = db, dsn
}

func (e *env) setupSQLite(ctx context.Context) {
	dir, err := os.MkdirTemp("", "lockreg-bench-")
	if err != nil {
		e.sqliteErr = err
		return
	}
	e.sqliteDir = dir
	e.sqliteDSN = fmt.Sprintf("file:%s?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)", filepath.Join(dir, "lock.db"))
	db, err := sql.Open("sqlite", e.sqliteDSN)
	if err != nil {
		e.sqliteErr = err
		return
	}
	defer db.Close()
	if err := sqlstore.CreateSchema(ctx, db, sqlstore.Config{Prefix: lockregPrefix}); err != nil {
		e.sqliteErr = err
	}
}

// unavailable says why the server of c cannot be used, or nil.
func (e *env) unavailable(c contestant) error {
	switch c.server {
	case "postgres":
		return e.pgErr
	case "mariadb":
		return e.myErr
	case "redis":
		return e.redis.err
	default:
		return e.sqliteErr
	}
}

// reset empties the lock tables of c's server, so that every contestant
// starts from the same state, and for PostgreSQL vacuums them and takes a
// checkpoint, as the reference does.
func (e *env) reset(ctx context.Context, c contestant) error {
	switch c.server {
	case "postgres":
		db, _, err := openPgx(e.pgDSN, 1)
		if err != nil {
			return err
		}
		defer db.Close()
		// The queue tables too: without autovacuum (as on the benchmark's
		// machine) their dead places would pile up from run to run.
		tables := strings.ToLower(lockregPrefix+"LOCK, "+lockregPrefix+"LOCK_WAIT, "+springPrefix+"LOCK, "+springPrefix+"LOCK_WAIT, ") +
			shedlockTable + ", " + pglockTable
		for _, q := range []string{"TRUNCATE " + tables, "VACUUM (ANALYZE) " + tables, "CHECKPOINT"} {
			if _, err := db.ExecContext(ctx, q); err != nil {
				return fmt.Errorf("%s: %w", q, err)
			}
		}
	case "mariadb":
		_, err := e.myAdmin.ExecContext(ctx, "TRUNCATE TABLE "+lockregPrefix+"LOCK")
		return err
	case "sqlite":
		db, err := sql.Open("sqlite", e.sqliteDSN)
		if err != nil {
			return err
		}
		defer db.Close()
		_, err = db.ExecContext(ctx, "DELETE FROM "+lockregPrefix+"LOCK")
		return err
	case "redis":
		return e.redis.reset(ctx)
	}
	return nil
}

// serverCount returns a server-side count of c's work so far: for
// PostgreSQL the committed and rolled-back transactions of the benchmark's
// database (pg_stat_database; pg_stat_statements is not loaded), for MariaDB
// the Com_* statement counters. ok is false where the server counts nothing
// (SQLite).
//
// PostgreSQL backends flush their counters at most once a second while busy,
// and always when they exit, so the caller reads them only once every
// connection to the database has been closed (waitIdle).
func (e *env) serverCount(ctx context.Context, c contestant) (n int64, ok bool, err error) {
	switch c.server {
	case "postgres":
		err = e.pgAdmin.QueryRowContext(ctx,
			`SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = $1`, e.pgDB).Scan(&n)
		return n, err == nil, err
	case "mariadb":
		rows, err := e.myAdmin.QueryContext(ctx, `SHOW GLOBAL STATUS WHERE Variable_name IN `+
			`('Com_select','Com_insert','Com_update','Com_delete','Com_begin','Com_commit','Com_rollback')`)
		if err != nil {
			return 0, false, err
		}
		defer rows.Close()
		for rows.Next() {
			var name string
			var v int64
			if err := rows.Scan(&name, &v); err != nil {
				return 0, false, err
			}
			n += v
		}
		return n, true, rows.Err()
	}
	return 0, false, nil
}

// waitIdle waits until no client backend is connected to the benchmark's
// PostgreSQL database, so that their statistics have been flushed.
func (e *env) waitIdle(ctx context.Context, c contestant) {
	if c.server != "postgres" || e.pgDB == "" {
		return
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		var n int
		err := e.pgAdmin.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND backend_type = 'client backend' AND pid <> pg_backend_pid()`, e.pgDB).Scan(&n)
		if err != nil || n == 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(30 * time.Millisecond)
}

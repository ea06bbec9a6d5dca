package main

// What the report says about the machine and the servers, the settings
// of the benchmark's own database that those facts report
// (setupDatabaseSettings: synchronous_commit, pg_stat_statements), and the
// statements' server-side figures (pg_stat_statements) it reads per
// contestant.

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"runtime"
	"strings"

	"github.com/jackc/pgx/v5"
)

// facts describes the machine and the servers.
func (e *env) facts(ctx context.Context) [][2]string {
	f := [][2]string{
		{"CPU", fmt.Sprintf("%d cores (runtime.NumCPU), GOMAXPROCS %d, %s", runtime.NumCPU(), runtime.GOMAXPROCS(0), cpuModel())},
		{"Go", runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH},
	}
	if e.pgErr == nil || e.pgAdmin != nil {
		if e.pgAdmin != nil {
			var v string
			e.pgAdmin.QueryRowContext(ctx, "SHOW server_version").Scan(&v)
			var s []string
			for _, name := range []string{"fsync", "synchronous_commit", "wal_sync_method", "full_page_writes", "shared_buffers", "shared_preload_libraries", "max_connections"} {
				var val string
				if err := e.pgAdmin.QueryRowContext(ctx, "SELECT current_setting($1)", name).Scan(&val); err == nil {
					if val == "" {
						val = "''"
					}
					s = append(s, name+"="+val)
				}
			}
			if db, _, err := openPgx(e.pgDSN, 1); err == nil {
				var val string
				if db.QueryRowContext(ctx, "SHOW synchronous_commit").Scan(&val) == nil {
					s = append(s, "benchmark database's synchronous_commit="+val)
				}
				db.Close()
			}
			if e.pgss {
				s = append(s, "server time per statement from pg_stat_statements")
			} else if e.pgssErr != nil {
				s = append(s, "no pg_stat_statements (-own-postgres starts a server with it)")
			}
			if e.ownPG != nil {
				s = append(s, fmt.Sprintf("the benchmark's own server (-own-postgres %d, %s)", e.ownPG.port, e.ownPG.bin))
			}
			f = append(f, [2]string{"PostgreSQL", v + ", database " + e.pgDB + "; " + strings.Join(s, ", ")})
		}
	}
	if e.pgErr != nil {
		f = append(f, [2]string{"PostgreSQL", "skipped: " + e.pgErr.Error()})
	}
	if e.myErr != nil {
		f = append(f, [2]string{"MariaDB", "skipped: " + e.myErr.Error()})
	} else {
		var v string
		e.myAdmin.QueryRowContext(ctx, "SELECT VERSION()").Scan(&v)
		var s []string
		for _, name := range []string{"innodb_flush_log_at_trx_commit", "sync_binlog", "log_bin", "innodb_buffer_pool_size", "transaction_isolation"} {
			var k, val string
			if err := e.myAdmin.QueryRowContext(ctx, "SHOW VARIABLES LIKE '"+name+"'").Scan(&k, &val); err == nil {
				s = append(s, name+"="+val)
			}
		}
		f = append(f, [2]string{"MariaDB", v + "; " + strings.Join(s, ", ")})
	}
	if e.sqliteErr != nil {
		f = append(f, [2]string{"SQLite", "skipped: " + e.sqliteErr.Error()})
	} else if db, err := sql.Open("sqlite", e.sqliteDSN); err == nil {
		var v, jm string
		var syn int
		db.QueryRowContext(ctx, "SELECT sqlite_version()").Scan(&v)
		db.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&jm)
		db.QueryRowContext(ctx, "PRAGMA synchronous").Scan(&syn)
		db.Close()
		f = append(f, [2]string{"SQLite", fmt.Sprintf("%s (modernc.org/sqlite), file in %s, journal_mode=%s, synchronous=%d, busy_timeout=5000", v, os.TempDir(), jm, syn)})
	}
	f = append(f, e.redis.fact(ctx))
	return f
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "model name") {
			if i := strings.IndexByte(line, ':'); i >= 0 {
				return strings.TrimSpace(line[i+1:])
			}
		}
	}
	return ""
}

// setupDatabaseSettings sets synchronous_commit on the benchmark's own
// database (ALTER DATABASE, so that every session of every driver, the
// listeners' too, has it; without -synchronous-commit it resets it to the
// server's), and finds out whether pg_stat_statements is loaded.
func (e *env) setupDatabaseSettings(ctx context.Context) error {
	if e.pgDB == "" || e.pgDB == e.adminDB() {
		if e.syncCommit != "" {
			return fmt.Errorf("-synchronous-commit needs the benchmark's own database (-pgdb)")
		}
	} else {
		q := `ALTER DATABASE ` + pgx.Identifier{e.pgDB}.Sanitize() + ` RESET synchronous_commit`
		if e.syncCommit != "" {
			q = `ALTER DATABASE ` + pgx.Identifier{e.pgDB}.Sanitize() + ` SET synchronous_commit = ` + e.syncCommit
		}
		if _, err := e.pgAdmin.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	_, err := e.pgAdmin.ExecContext(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`)
	if err == nil {
		var n int64
		err = e.pgAdmin.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_statements`).Scan(&n)
	}
	e.pgss, e.pgssErr = err == nil, err
	return nil
}

// adminDB is the database of the configured DSN.
func (e *env) adminDB() string {
	var db string
	e.pgAdmin.QueryRowContext(context.Background(), `SELECT current_database()`).Scan(&db)
	return db
}

// stmtStat is one statement's server time, from pg_stat_statements.
type stmtStat struct {
	Query  string  `json:"query"`
	Calls  int64   `json:"calls"`
	MeanUs float64 `json:"mean_exec_us"`
	// Plans and PlanUs count the statement's planning (track_planning,
	// on in -own-postgres): a prepared statement whose generic plan
	// PostgreSQL rejects is planned on every execution.
	Plans  int64   `json:"plans"`
	PlanUs float64 `json:"mean_plan_us"`
}

// resetStatements empties pg_stat_statements, if loaded.
func (e *env) resetStatements(ctx context.Context, c contestant) {
	if c.server != "postgres" || !e.pgss {
		return
	}
	if _, err := e.pgAdmin.ExecContext(ctx, `SELECT pg_stat_statements_reset()`); err != nil {
		e.logf("pg_stat_statements_reset: %v", err)
	}
}

// statements reads the benchmark database's statements since the reset:
// the mean execution time over all of them, and the statements by calls.
func (e *env) statements(ctx context.Context, c contestant) (meanUs *float64, stats []stmtStat) {
	if c.server != "postgres" || !e.pgss {
		return nil, nil
	}
	rows, err := e.pgAdmin.QueryContext(ctx, `SELECT s.query, s.calls, s.total_exec_time, s.plans, s.total_plan_time FROM pg_stat_statements s `+
		`JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = $1 AND s.calls > 0 ORDER BY s.calls DESC, s.total_exec_time DESC`, e.pgDB)
	if err != nil {
		e.logf("pg_stat_statements: %v", err)
		return nil, nil
	}
	defer rows.Close()
	var calls int64
	var total float64
	for rows.Next() {
		var s stmtStat
		var ms, planMs float64
		if err := rows.Scan(&s.Query, &s.Calls, &ms, &s.Plans, &planMs); err != nil {
			e.logf("pg_stat_statements: %v", err)
			return nil, nil
		}
		s.MeanUs = ms * 1000 / float64(s.Calls)
		if s.Plans > 0 {
			s.PlanUs = planMs * 1000 / float64(s.Plans)
		}
		calls += s.Calls
		total += ms * 1000
		stats = append(stats, s)
	}
	if calls == 0 {
		return nil, nil
	}
	return fp(total / float64(calls)), stats
}

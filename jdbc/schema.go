package jdbc

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"regexp"
	"slices"
	"strings"
	"time"

	lockregsql "github.com/lockreg/lockreg/sql"
)

// scriptPrefix matches the default table prefix in the embedded scripts.
var scriptPrefix = regexp.MustCompile(`\bINT_`)

// CreateSchema creates the lock table (and whatever later scripts add) for
// the dialect of db, with the prefix WithPrefix configures: it executes the
// up scripts embedded in package [github.com/lockreg/lockreg/sql] for the
// dialect, in name order, each statement on its own, with INT_ replaced by
// the prefix. It creates what is missing and leaves the rest, so it may run
// at every start: on an empty database, on tables it made before, and on a
// Spring Integration 7 INT_LOCK, to which it adds lockreg's FENCE column. Of
// the options it uses WithPrefix and WithDialect and checks the rest.
//
// Any number of processes may call it at once: the calls for one database
// and prefix take turns, under a transaction-level advisory lock on
// PostgreSQL, GET_LOCK on MySQL/MariaDB and BEGIN IMMEDIATE on SQLite, all
// on one connection of db, which it holds for the call. On PostgreSQL and
// SQLite the statements run in that transaction, so a failed call leaves
// nothing half done. db should be a pool (*sql.DB, *sqlx.DB) or a single
// connection; another jdbc.DB without a Conn method is used as it is. It
// costs a few round trips more than one per statement.
func CreateSchema(ctx context.Context, db DB, opts ...Option) error {
	cfg, err := newConfig(db, opts)
	if err != nil {
		return err
	}
	r := &LockRepository{db: db, cfg: cfg} // for error classification
	names, err := fs.Glob(lockregsql.FS, string(cfg.dialect)+"/*.up.sql")
	if err != nil {
		return fmt.Errorf("jdbc: create schema: %w", err)
	}
	slices.Sort(names)
	type script struct {
		name       string
		statements []string
	}
	var scripts []script
	for _, name := range names {
		b, err := fs.ReadFile(lockregsql.FS, name)
		if err != nil {
			return fmt.Errorf("jdbc: create schema: %w", err)
		}
		scripts = append(scripts, script{name, statements(scriptPrefix.ReplaceAllLiteralString(string(b), cfg.prefix))})
	}
	err = inSchemaTurn(ctx, db, cfg, func(x execer) error {
		for _, sc := range scripts {
			for _, s := range sc.statements {
				if cfg.dialect == SQLite {
					if exists, err := sqliteColumnAdded(ctx, x, s); err != nil {
						return fmt.Errorf("%s: %w", sc.name, err)
					} else if exists {
						continue
					}
				}
				if _, err := x.ExecContext(ctx, s); err != nil {
					return fmt.Errorf("%s: %w", sc.name, err)
				}
			}
		}
		return nil
	})
	if err != nil {
		return r.wrap(ctx, "jdbc: create schema", err)
	}
	return nil
}

// execer is what CreateSchema runs statements on: a *sql.Conn or a DB.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// inSchemaTurn runs f on one connection of db while no other CreateSchema
// call for the same database and prefix runs, and, on PostgreSQL and
// SQLite, in a transaction that commits if f returns nil. A connection
// whose lock or transaction could not be ended is closed, not reused.
func inSchemaTurn(ctx context.Context, db DB, cfg *config, f func(x execer) error) (err error) {
	x, done, err := pin(ctx, db)
	if err != nil {
		return err
	}
	bad := false
	defer func() { done(bad) }()
	// Ending the turn must not depend on ctx, which may be what failed.
	end, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	key := "lockreg.CreateSchema:" + strings.ToLower(cfg.prefix)
	switch cfg.dialect {
	case MySQL:
		// GET_LOCK is per server and per session, and survives the
		// implicit commits of DDL; the name holds the database's name.
		const name = `CONCAT('lockreg_schema_', MD5(CONCAT(COALESCE(DATABASE(), ''), '.', ?)))`
		for {
			var got sql.NullInt64
			if err := x.QueryRowContext(ctx, `SELECT GET_LOCK(`+name+`, 5)`, key).Scan(&got); err != nil {
				bad = true
				return err
			}
			if !got.Valid {
				return errors.New("GET_LOCK failed")
			}
			if got.Int64 == 1 {
				break
			}
		}
		err = f(x)
		var released sql.NullInt64
		if rerr := x.QueryRowContext(end, `SELECT RELEASE_LOCK(`+name+`)`, key).Scan(&released); rerr != nil || released.Int64 != 1 {
			bad = true
		}
		return err
	case Postgres:
		h := fnv.New64a()
		h.Write([]byte(key))
		if _, err := x.ExecContext(ctx, `BEGIN`); err != nil {
			bad = true
			return err
		}
		if _, err = x.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(h.Sum64())); err == nil {
			err = f(x)
		}
	default: // SQLite: one writer at a time, waiting as busy_timeout says and then as ctx allows
		for wait := 5 * time.Millisecond; ; wait = min(2*wait, 200*time.Millisecond) {
			if _, err = x.ExecContext(ctx, `BEGIN IMMEDIATE`); err == nil || !isTransient(err) {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("%w: %w", ctx.Err(), err)
			case <-time.After(wait):
			}
		}
		if err != nil {
			return err
		}
		err = f(x)
	}
	if err == nil {
		if _, err = x.ExecContext(ctx, `COMMIT`); err == nil {
			return nil
		}
	}
	if _, rerr := x.ExecContext(end, `ROLLBACK`); rerr != nil {
		bad = true
	}
	return err
}

// pin returns one connection of db, and the function that gives it back,
// closing it when bad. A db that cannot hand out connections is taken to be
// one.
func pin(ctx context.Context, db DB) (execer, func(bad bool), error) {
	p, ok := db.(interface {
		Conn(context.Context) (*sql.Conn, error)
	})
	if !ok {
		return db, func(bool) {}, nil
	}
	conn, err := p.Conn(ctx)
	if err != nil {
		return nil, nil, err
	}
	return conn, func(bad bool) {
		if bad {
			conn.Raw(func(any) error { return driver.ErrBadConn }) // makes database/sql close it
		}
		conn.Close()
	}, nil
}

// addColumn matches the scripts' statements that add a column without IF
// NOT EXISTS (SQLite has none).
var addColumn = regexp.MustCompile(`(?i)^ALTER\s+TABLE\s+(\w+)\s+ADD\s+(?:COLUMN\s+)?(\w+)\s`)

// sqliteColumnAdded reports whether statement adds a column that exists
// already, from SQLite's catalog.
func sqliteColumnAdded(ctx context.Context, x execer, statement string) (bool, error) {
	m := addColumn.FindStringSubmatch(statement)
	if m == nil || strings.EqualFold(m[2], "IF") {
		return false, nil
	}
	var n int
	err := x.QueryRowContext(ctx, `SELECT COUNT(*) FROM pragma_table_info(?) WHERE name = ? COLLATE NOCASE`, m[1], m[2]).Scan(&n)
	return n > 0, err
}

// statements splits a script into statements: it drops "--" comment lines
// and splits at semicolons, which the scripts use only to end statements.
func statements(script string) []string {
	var b strings.Builder
	for line := range strings.Lines(script) {
		if !strings.HasPrefix(strings.TrimSpace(line), "--") {
			b.WriteString(line)
		}
	}
	var out []string
	for s := range strings.SplitSeq(b.String(), ";") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

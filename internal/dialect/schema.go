package dialect

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/lockreg/lockreg/internal/backoff"
	lockregsql "github.com/lockreg/lockreg/sql"
)

// The schema scripts of package sql are named NNNNNN_<part>[_more].up.sql;
// the part says which package creates the tables (see ApplyScripts).
const (
	LockScripts  = "lock"          // the lock table and PostgreSQL's queue: package jdbc
	GroupScripts = "message_group" // the message groups: package groupstore/sqlstore
)

// scriptPrefix matches Spring Integration's default table prefix in the
// scripts. They are plain SQL, which migration tools apply as they are:
// they have no parameters and no macros, and ApplyScripts only renames
// their tables, constraints and indexes.
var scriptPrefix = regexp.MustCompile(`\bINT_`)

// ApplyScripts executes the dialect's up scripts of parts (LockScripts,
// GroupScripts) in name order, each statement on its own, with INT_
// replaced by prefix, while no other call for the same database and prefix
// runs: the calls take turns under a transaction-level advisory lock on
// PostgreSQL, GET_LOCK on MySQL/MariaDB and BEGIN IMMEDIATE on SQLite, all
// on one connection of db, held for the call. On PostgreSQL and SQLite the
// statements run in that transaction, so a failed call leaves nothing half
// done. db should be a pool (*sql.DB) or a single connection: a db without
// a Conn method is taken to be one. Errors name the script.
func (d *Dialect) ApplyScripts(ctx context.Context, db Querier, prefix string, parts ...string) error {
	names, err := fs.Glob(lockregsql.FS, d.Name+"/*.up.sql")
	if err != nil {
		return err
	}
	names = slices.DeleteFunc(names, func(n string) bool {
		_, name, _ := strings.Cut(n, "_")
		return !slices.ContainsFunc(parts, func(part string) bool {
			rest, ok := strings.CutPrefix(name, part)
			return ok && (strings.HasPrefix(rest, "_") || strings.HasPrefix(rest, "."))
		})
	})
	slices.Sort(names)
	var all []statement
	for _, name := range names {
		b, err := fs.ReadFile(lockregsql.FS, name)
		if err != nil {
			return err
		}
		for _, s := range splitScript(scriptPrefix.ReplaceAllLiteralString(string(b), prefix)) {
			all = append(all, statement{name, s})
		}
	}
	return d.apply(ctx, db, "lockreg.CreateSchema:"+strings.ToLower(prefix), all)
}

// ApplyDDL executes statements in order, each on its own, taking turns with
// every other ApplyDDL or ApplyScripts call of the same key on the database
// as ApplyScripts does (on PostgreSQL and SQLite in one transaction).
// Errors name what.
func (d *Dialect) ApplyDDL(ctx context.Context, db Querier, key, what string, statements ...string) error {
	all := make([]statement, len(statements))
	for i, s := range statements {
		all[i] = statement{what, s}
	}
	return d.apply(ctx, db, key, all)
}

// statement is one statement of a script.
type statement struct{ script, sql string }

// apply runs statements on one connection of db during the turn of key.
// A call that fails with a transient error (a deadlock: a script that
// locks a table the application is writing, as 000006's DROP INDEX does)
// runs again, up to 5 times in all; the scripts are idempotent.
func (d *Dialect) apply(ctx context.Context, db Querier, key string, all []statement) error {
	bo := backoff.New(20*time.Millisecond, 500*time.Millisecond)
	for attempt := 1; ; attempt++ {
		err := d.applyOnce(ctx, db, key, all)
		if err == nil || !IsTransient(err) || ctx.Err() != nil || attempt == 5 || !backoff.Sleep(ctx, bo.Next(), nil) {
			return err
		}
	}
}

// applyOnce is one attempt of apply.
func (d *Dialect) applyOnce(ctx context.Context, db Querier, key string, all []statement) error {
	x, done, err := pin(ctx, db)
	if err != nil {
		return err
	}
	// Ending the turn must not depend on ctx, which may be what failed.
	end, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	bad, err := d.turn(ctx, end, x, key, func() error {
		for _, s := range all {
			if d.skipScript != nil {
				if skip, err := d.skipScript(ctx, x, s.sql); err != nil {
					return fmt.Errorf("%s: %w", s.script, err)
				} else if skip {
					continue
				}
			}
			if _, err := x.ExecContext(ctx, s.sql); err != nil {
				return fmt.Errorf("%s: %w", s.script, err)
			}
		}
		return nil
	})
	done(bad)
	return err
}

// commitOrRollback runs f in the transaction begun on q, and commits it if
// f returns nil; otherwise, or if the commit fails, it rolls it back with
// end. It reports bad when the rollback failed too.
func commitOrRollback(ctx, end context.Context, q Querier, f func() error) (bool, error) {
	err := f()
	if err == nil {
		if _, err = q.ExecContext(ctx, `COMMIT`); err == nil {
			return false, nil
		}
	}
	_, rerr := q.ExecContext(end, `ROLLBACK`)
	return rerr != nil, err
}

// pin returns one connection of db, and the function that gives it back,
// closing it when bad. A db that cannot hand out connections is taken to be
// one.
func pin(ctx context.Context, db Querier) (Querier, func(bad bool), error) {
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

// splitScript splits a script into statements: it drops "--" comment
// lines and splits at semicolons, which the scripts use only to end
// statements.
func splitScript(script string) []string {
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

// MissingColumns returns those of cols that table lacks, and reports
// noTable when the catalog says the table does not exist (only on
// dialects whose errors do not say so by code, SQLite). Elsewhere it
// selects each column, which fails with an undefined-column code when it
// is missing.
func (d *Dialect) MissingColumns(ctx context.Context, q Querier, table string, cols []string) (missing []string, noTable bool, err error) {
	if d.tableColumns != nil {
		have, err := d.tableColumns(ctx, q, table)
		if err != nil || len(have) == 0 {
			return nil, err == nil, err
		}
		for _, c := range cols {
			if !slices.ContainsFunc(have, func(h string) bool { return strings.EqualFold(h, c) }) {
				missing = append(missing, c)
			}
		}
		return missing, false, nil
	}
	for _, c := range cols {
		switch err := SelectNothing(ctx, q, `SELECT `+c+` FROM `+table+` WHERE 1 = 0`); {
		case err != nil && IsUndefinedColumn(err):
			missing = append(missing, c)
		case err != nil:
			return nil, false, err
		}
	}
	return missing, false, nil
}

// SelectNothing runs a query that returns no rows and reports its error.
func SelectNothing(ctx context.Context, q Querier, query string) error {
	rows, err := q.QueryContext(ctx, query)
	if err != nil {
		return err
	}
	for rows.Next() {
	}
	err = rows.Err()
	rows.Close()
	return err
}

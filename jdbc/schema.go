package jdbc

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/lockreg/lockreg/internal/dialect"
)

// ErrUnsupportedLayout reports a lock table whose columns are not the ones
// lockreg needs: Spring Integration 7's INT_LOCK plus lockreg's FENCE,
// LOCK_NAME and HOLDER. The
// returned error wraps it, names the table and the layout found (such as
// Spring Integration 5.x/6.x's, which has no EXPIRED_AFTER), and says how to
// migrate it, with the statements for the dialect where CreateSchema does
// not do it.
var ErrUnsupportedLayout = errors.New("jdbc: unsupported lock table layout")

// CreateSchema creates the lock table and, on PostgreSQL, its waiter queue
// for the dialect of db, with the prefix WithPrefix configures: it executes
// the lock scripts embedded in package [github.com/lockreg/lockreg/sql] for
// the dialect (000001_lock, 000002_lock_fence_queue, 000004_lock_holder and
// whatever later lock scripts add), in name order, each statement on its own, with INT_
// replaced by the prefix. The message-group tables are package
// groupstore/sqlstore's, whose CreateSchema creates them. It creates what
// is missing and leaves the rest, so it may
// run at every start: on an empty database, on tables it made before, and
// on a Spring Integration 7 INT_LOCK or one of an earlier lockreg, to which
// it adds lockreg's columns (FENCE, LOCK_NAME, HOLDER). Of the options it uses WithPrefix and WithDialect and checks the
// rest.
//
// Any number of processes may call it at once: the calls for one database
// and prefix take turns, under a transaction-level advisory lock on
// PostgreSQL, GET_LOCK on MySQL/MariaDB and BEGIN IMMEDIATE on SQLite, all
// on one connection of db, which it holds for the call. On PostgreSQL and
// SQLite the statements run in that transaction, so a failed call leaves
// nothing half done. db should be a pool (*sql.DB, *sqlx.DB) or a single
// connection: a jdbc.DB without a Conn method is taken to be one. It costs
// a few round trips more than one per statement.
//
// It refuses a lock table of another layout, such as Spring Integration
// 5.x/6.x's, with an error wrapping ErrUnsupportedLayout that gives the
// statements migrating it, and changes nothing then.
func CreateSchema(ctx context.Context, db DB, opts ...Option) error {
	cfg, err := newConfig(db, opts)
	if err != nil {
		return err
	}
	// for inspectTable and error classification
	r := &LockRepository{db: db, cfg: cfg, sql: &lockStatements{check: cfg.d.MustCompile(dialect.CheckLock, cfg.prefix)}}
	if state, _, err := r.inspectTable(ctx); err != nil && state != tableMissing {
		return r.wrap(ctx, "jdbc: create schema", err)
	}
	if err := cfg.d.ApplyScripts(ctx, db, cfg.prefix, dialect.LockScripts); err != nil {
		return r.wrap(ctx, "jdbc: create schema", err)
	}
	return nil
}

// tableState is what inspectTable found.
type tableState int

const (
	tableUnknown tableState = iota // with an error
	tableMissing
	tableComplete       // Spring Integration 7's columns and lockreg's
	tableWithoutLockreg // Spring Integration 7's columns, some of lockreg's missing
)

// lockregColumns are the columns lockreg adds to Spring Integration 7's
// INT_LOCK: the fencing token (000002) and the readable key and holder
// (000004).
var lockregColumns = []string{"FENCE", "LOCK_NAME", "HOLDER"}

// spring6Columns are the columns of Spring Integration 5.x/6.x's INT_LOCK;
// 7 adds EXPIRED_AFTER, and lockreg FENCE.
var spring6Columns = []string{"LOCK_KEY", "REGION", "CLIENT_ID", "CREATED_DATE"}

// inspectTable tells whether the lock table is missing (then with the
// database's error saying so), complete or lacks only lockreg's columns
// (then returning them), and returns an
// error wrapping ErrUnsupportedLayout for any other layout. It is checkSQL,
// one SELECT that reads no rows; only when that fails does it look for the
// columns one by one. Other failures are returned as they are.
func (r *LockRepository) inspectTable(ctx context.Context) (tableState, []string, error) {
	cfg := r.cfg
	err := dialect.SelectNothing(ctx, r.db, r.sql.check.SQL)
	if err == nil {
		return tableComplete, nil, nil
	}
	if ctx.Err() != nil {
		return tableUnknown, nil, err
	}
	if cfg.d.IsNoTable(ctx, r.db, err) {
		return tableMissing, nil, err
	}
	missing, noTable, cerr := cfg.d.MissingColumns(ctx, r.db, cfg.table,
		append(append(slices.Clone(spring6Columns), "EXPIRED_AFTER"), lockregColumns...))
	switch {
	case cerr != nil:
		return tableUnknown, nil, err
	case noTable:
		return tableMissing, nil, err
	case len(missing) == 0: // made meanwhile, or something else failed
		if dialect.SelectNothing(ctx, r.db, r.sql.check.SQL) == nil {
			return tableComplete, nil, nil
		}
		return tableUnknown, nil, err
	case !slices.ContainsFunc(missing, func(c string) bool { return !slices.Contains(lockregColumns, c) }):
		return tableWithoutLockreg, missing, nil
	case slices.Contains(missing, "EXPIRED_AFTER") && !slices.ContainsFunc(spring6Columns, func(c string) bool {
		return slices.Contains(missing, c)
	}):
		return tableUnknown, nil, fmt.Errorf("%w: table %s has the layout of Spring Integration 5.x/6.x (no EXPIRED_AFTER column); "+
			"lockreg needs Spring Integration 7's, which Spring 5.x/6.x applications cannot use: stop them, "+
			"then migrate it with: %s; then call jdbc.CreateSchema or apply the scripts in lockreg's sql/%s folder, "+
			"which add lockreg's columns",
			ErrUnsupportedLayout, cfg.table, strings.Join(cfg.d.Spring6Migration(cfg.table), "; "), cfg.dialect)
	default:
		return tableUnknown, nil, fmt.Errorf("%w: table %s lacks %s of Spring Integration 7's INT_LOCK, which lockreg needs "+
			"(see lockreg's sql/%s/000001_lock.up.sql)", ErrUnsupportedLayout, cfg.table, strings.Join(missing, ", "), cfg.dialect)
	}
}

// checkTable is the check of NewLockRepository and Check: nil for a
// complete table, and for a missing one when missingOK; otherwise an error
// wrapping ErrNoTable, ErrUnsupportedLayout or the database's error.
func (r *LockRepository) checkTable(ctx context.Context, what string, missingOK bool) error {
	state, missing, err := r.inspectTable(ctx)
	switch {
	case state == tableMissing:
		if missingOK {
			return nil
		}
		return fmt.Errorf("%s: %w", what, r.noTable(err))
	case err != nil:
		return r.wrap(ctx, what, err)
	case state == tableWithoutLockreg:
		return fmt.Errorf("%s: %w: table %s has Spring Integration 7's layout without lockreg's %s; "+
			"add them with jdbc.CreateSchema or the scripts in lockreg's sql/%s folder",
			what, ErrUnsupportedLayout, r.cfg.table, strings.Join(missing, ", "), r.cfg.dialect)
	}
	return nil
}

package jdbc

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/lockreg/lockreg/internal/dialect"
)

// ErrUnsupportedLayout reports a lock table lockreg cannot use as it is:
// one whose columns are neither Spring Integration 7's INT_LOCK nor Spring
// Integration 5.4-6.x's (see Layout), one of either layout that lacks the
// columns lockreg adds (NewLockRepository and Check; CreateSchema adds
// them: FENCE, LOCK_NAME and HOLDER to a Spring 7 table, and on PostgreSQL
// the has-waiters flag QUEUED_UNTIL, script 000005_lock_queued; FENCE to a
// Spring 5.4-6.x one), or one of the other layout than WithLayout asks for. The
// returned error wraps it, names the table and the layout found, and says
// what to do: add the columns, or the statements that migrate a Spring
// 5.4-6.x table to Spring 7's layout (for the dialect where CreateSchema
// does not do it).
var ErrUnsupportedLayout = errors.New("jdbc: unsupported lock table layout")

// CreateSchema creates the lock table and, on PostgreSQL, its waiter queue
// for the dialect of db, with the prefix WithPrefix configures: it executes
// the lock scripts embedded in package [github.com/lockreg/lockreg/sql] for
// the dialect (000001_lock, 000002_lock_fence_queue and whatever later lock
// scripts add), in name order, each statement on its own, with INT_
// replaced by the prefix. The message-group tables are package
// groupstore/sqlstore's, whose CreateSchema creates them. It creates what
// is missing and leaves the rest, so it may
// run at every start: on an empty database, on tables it made before, and
// on a Spring Integration 7 INT_LOCK or one of an earlier lockreg, to which
// it adds lockreg's columns (FENCE, LOCK_NAME, HOLDER, and on PostgreSQL
// QUEUED_UNTIL).
//
// On a Spring Integration 5.4-6.x INT_LOCK (LayoutSpring6, detected or set
// with WithLayout) it only adds FENCE, with a default, which those
// applications do not notice, and creates no queue; with
// WithLayout(LayoutSpring6) a missing table is created in that layout
// (Spring's columns and FENCE). Of the options it uses WithPrefix,
// WithDialect and WithLayout and checks the rest.
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
// It refuses a table of another layout than WithLayout asks for (such as
// a Spring 5.4-6.x table with WithLayout(LayoutSpring7), with the
// statements migrating it) or of neither layout, with an error wrapping
// ErrUnsupportedLayout, and changes nothing then.
func CreateSchema(ctx context.Context, db DB, opts ...Option) error {
	cfg, err := newConfig(db, opts)
	if err != nil {
		return err
	}
	r := probe(db, cfg) // for inspectTable and error classification
	state, _, err := r.inspectTable(ctx)
	if err != nil && state != tableMissing {
		return r.wrap(ctx, "jdbc: create schema", err)
	}
	if err := r.layoutError("jdbc: create schema", state); err != nil {
		return err
	}
	key := "lockreg.CreateSchema:" + strings.ToLower(cfg.prefix)
	switch {
	case state == tableMissing && cfg.layout == LayoutSpring6:
		err = cfg.d.ApplyDDL(ctx, db, key, "jdbc: Spring 5.4-6.x lock table", cfg.d.Spring6Table(cfg.table))
	case state == tableSpring6WithoutFence:
		err = cfg.d.ApplyDDL(ctx, db, key, "jdbc: FENCE", cfg.d.Spring6Fence(cfg.table)...)
	case state == tableSpring6:
	default:
		err = cfg.d.ApplyScripts(ctx, db, cfg.prefix, dialect.LockScripts)
	}
	if err != nil {
		return r.wrap(ctx, "jdbc: create schema", err)
	}
	return nil
}

// probe returns a repository of cfg on db that can only inspect its table.
func probe(db DB, cfg *config) *LockRepository {
	return &LockRepository{db: db, cfg: cfg, sql: &lockStatements{
		check:  cfg.d.MustCompile(cfg.d.CheckLock(), cfg.prefix),
		check6: cfg.d.MustCompile(dialect.Spring6CheckLock, cfg.prefix),
	}}
}

// tableState is what inspectTable found.
type tableState int

const (
	tableUnknown tableState = iota // with an error
	tableMissing
	tableComplete            // Spring Integration 7's columns and lockreg's
	tableWithoutLockreg      // Spring Integration 7's columns, some of lockreg's missing
	tableSpring6             // Spring Integration 5.4-6.x's columns and FENCE
	tableSpring6WithoutFence // Spring Integration 5.4-6.x's columns only
)

// spring6Columns are the columns of Spring Integration 5.4-6.x's INT_LOCK;
// 7 adds EXPIRED_AFTER, and lockreg FENCE.
var spring6Columns = []string{"LOCK_KEY", "REGION", "CLIENT_ID", "CREATED_DATE"}

// inspectTable tells the lock table's layout, or that it is missing (then
// with the database's error saying so), with lockreg's columns that a
// Spring 7 table lacks, and returns an error wrapping
// ErrUnsupportedLayout for a table of neither layout. It is one SELECT that
// reads no rows for a Spring 7 table, two for a Spring 5.4-6.x one; only
// when those fail does it look for the columns one by one. Other failures
// are returned as they are.
func (r *LockRepository) inspectTable(ctx context.Context) (tableState, []string, error) {
	cfg := r.cfg
	// lockreg's columns (see dialect.LockColumns): the fencing token
	// (000002), the readable key and holder (000004) and, on PostgreSQL,
	// the has-waiters flag (000005). A Spring 5.4-6.x table gets FENCE only.
	lockregColumns := cfg.d.LockColumns()
	// Spring 7's check first: a Spring 7 table passes Spring 6's too.
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
	if dialect.SelectNothing(ctx, r.db, r.sql.check6.SQL) == nil {
		if dialect.SelectNothing(ctx, r.db, `SELECT EXPIRED_AFTER FROM `+cfg.table+` WHERE 1 = 0`) != nil {
			return tableSpring6, nil, nil
		}
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
	case slices.Contains(missing, "EXPIRED_AFTER") && !slices.ContainsFunc(missing, func(c string) bool {
		return c != "EXPIRED_AFTER" && !slices.Contains(lockregColumns, c)
	}):
		if slices.Contains(missing, "FENCE") {
			return tableSpring6WithoutFence, nil, nil
		}
		return tableSpring6, nil, nil // made meanwhile
	default:
		return tableUnknown, nil, fmt.Errorf("%w: table %s lacks %s of Spring Integration 7's INT_LOCK, and is no "+
			"Spring Integration 5.4-6.x INT_LOCK either (see lockreg's sql/%s/000001_lock.up.sql)",
			ErrUnsupportedLayout, cfg.table, strings.Join(missing, ", "), cfg.dialect)
	}
}

// layoutError returns an error wrapping ErrUnsupportedLayout when the
// table found (state) is of another layout than WithLayout asks for.
func (r *LockRepository) layoutError(what string, state tableState) error {
	cfg := r.cfg
	spring6 := state == tableSpring6 || state == tableSpring6WithoutFence
	spring7 := state == tableComplete || state == tableWithoutLockreg
	switch {
	case cfg.layout == LayoutSpring7 && spring6:
		return fmt.Errorf("%s: %w: table %s has the layout of Spring Integration 5.4-6.x (no EXPIRED_AFTER column), "+
			"not Spring Integration 7's, which WithLayout(LayoutSpring7) asks for; leave the layout to be detected "+
			"(lockreg then shares the table with those applications), or stop them and migrate it with: %s; "+
			"then call jdbc.CreateSchema or apply the scripts in lockreg's sql/%s folder, which add lockreg's columns",
			what, ErrUnsupportedLayout, cfg.table, strings.Join(cfg.d.Spring6Migration(cfg.table), "; "), cfg.dialect)
	case cfg.layout == LayoutSpring6 && spring7:
		return fmt.Errorf("%s: %w: table %s has Spring Integration 7's layout (EXPIRED_AFTER), not Spring "+
			"Integration 5.4-6.x's, which WithLayout(LayoutSpring6) asks for", what, ErrUnsupportedLayout, cfg.table)
	}
	return nil
}

// settleTable is the check of NewLockRepository: it inspects the table,
// settles cfg's layout from it (LayoutSpring7 for a missing table unless
// WithLayout says otherwise) and returns an error for a table lockreg
// cannot use; a missing table is no error when missingOK.
func settleTable(ctx context.Context, db DB, cfg *config, what string, missingOK bool) error {
	r := probe(db, cfg)
	state, err := r.checkState(ctx, what, missingOK)
	if err != nil {
		return err
	}
	switch {
	case state == tableSpring6 || state == tableMissing && cfg.layout == LayoutSpring6:
		return cfg.useSpring6()
	default:
		cfg.layout = LayoutSpring7
	}
	return nil
}

// checkTable is the check of Check: nil for a complete table of the
// repository's layout; otherwise an error wrapping ErrNoTable,
// ErrUnsupportedLayout or the database's error.
func (r *LockRepository) checkTable(ctx context.Context, what string) error {
	_, err := probe(r.db, r.cfg).checkState(ctx, what, false)
	return err
}

// checkState inspects the table and turns what it found into an error.
func (r *LockRepository) checkState(ctx context.Context, what string, missingOK bool) (tableState, error) {
	state, missing, err := r.inspectTable(ctx)
	switch {
	case state == tableMissing:
		if missingOK {
			return state, nil
		}
		return state, fmt.Errorf("%s: %w", what, r.noTable(err))
	case err != nil:
		return state, r.wrap(ctx, what, err)
	}
	if err := r.layoutError(what, state); err != nil {
		return state, err
	}
	switch state {
	case tableWithoutLockreg:
		scripts := "the scripts in lockreg's sql/" + string(r.cfg.dialect) + " folder"
		if q := r.cfg.d.Lock.Queue; q != nil && slices.Contains(missing, q.FlagColumn) {
			scripts += " (" + q.FlagColumn + ": " + q.FlagScript + ")"
		}
		return state, fmt.Errorf("%s: %w: table %s has Spring Integration 7's layout without lockreg's %s; "+
			"add them with jdbc.CreateSchema or %s",
			what, ErrUnsupportedLayout, r.cfg.table, strings.Join(missing, ", "), scripts)
	case tableSpring6WithoutFence:
		return state, fmt.Errorf("%s: %w: table %s has Spring Integration 5.4-6.x's layout without lockreg's FENCE "+
			"column; add it with jdbc.CreateSchema (a BIGINT NOT NULL DEFAULT 0 column, which those applications "+
			"leave alone)", what, ErrUnsupportedLayout, r.cfg.table)
	}
	return state, nil
}

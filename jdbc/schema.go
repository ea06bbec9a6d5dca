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

	"github.com/go-sql-driver/mysql"

	lockregsql "github.com/lockreg/lockreg/sql"
)

// ErrUnsupportedLayout reports a lock table whose columns are not the ones
// lockreg needs: Spring Integration 7's INT_LOCK plus lockreg's FENCE. The
// returned error wraps it, names the table and the layout found (such as
// Spring Integration 5.x/6.x's, which has no EXPIRED_AFTER), and says how to
// migrate it, with the statements for the dialect where CreateSchema does
// not do it.
var ErrUnsupportedLayout = errors.New("jdbc: unsupported lock table layout")

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
	r := &LockRepository{db: db, cfg: cfg} // for inspectTable and error classification
	if r.check, err = compile(checkSQL, cfg.prefix, cfg.dialect); err != nil {
		return fmt.Errorf("jdbc: compiling a default query: %w", err) // a bug
	}
	if state, err := r.inspectTable(ctx); err != nil && state != tableMissing {
		return r.wrap(ctx, "jdbc: create schema", err)
	}
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

// tableState is what inspectTable found.
type tableState int

const (
	tableUnknown tableState = iota // with an error
	tableMissing
	tableComplete     // Spring Integration 7's columns and FENCE
	tableWithoutFence // Spring Integration 7's columns only
)

// spring6Columns are the columns of Spring Integration 5.x/6.x's INT_LOCK;
// 7 adds EXPIRED_AFTER, and lockreg FENCE.
var spring6Columns = []string{"LOCK_KEY", "REGION", "CLIENT_ID", "CREATED_DATE"}

// inspectTable tells whether the lock table is missing (then with the
// database's error saying so), complete or lacks only FENCE, and returns an
// error wrapping ErrUnsupportedLayout for any other layout. It is checkSQL,
// one SELECT that reads no rows; only when that fails does it look for the
// columns one by one. Other failures are returned as they are.
func (r *LockRepository) inspectTable(ctx context.Context) (tableState, error) {
	cfg := r.cfg
	err := selectNothing(ctx, r.db, r.check.sql)
	if err == nil {
		return tableComplete, nil
	}
	if ctx.Err() != nil {
		return tableUnknown, err
	}
	if isNoTable(err) {
		return tableMissing, err
	}
	var sqliteCols []string // SQLite's errors carry no specific code: ask its catalog
	if cfg.dialect == SQLite {
		if sqliteCols, err = sqliteColumns(ctx, r.db, cfg.table); err != nil {
			return tableUnknown, err
		}
		if len(sqliteCols) == 0 {
			return tableMissing, err
		}
	}
	var missing []string
	for _, c := range append(slices.Clone(spring6Columns), "EXPIRED_AFTER", "FENCE") {
		ok := slices.ContainsFunc(sqliteCols, func(s string) bool { return strings.EqualFold(s, c) })
		if cfg.dialect != SQLite {
			var cerr error
			if ok, cerr = r.hasColumn(ctx, c); cerr != nil {
				return tableUnknown, err
			}
		}
		if !ok {
			missing = append(missing, c)
		}
	}
	switch {
	case len(missing) == 0: // made meanwhile, or something else failed
		if selectNothing(ctx, r.db, r.check.sql) == nil {
			return tableComplete, nil
		}
		return tableUnknown, err
	case slices.Equal(missing, []string{"FENCE"}):
		return tableWithoutFence, nil
	case slices.Contains(missing, "EXPIRED_AFTER") && !slices.ContainsFunc(spring6Columns, func(c string) bool {
		return slices.Contains(missing, c)
	}):
		return tableUnknown, fmt.Errorf("%w: table %s has the layout of Spring Integration 5.x/6.x (no EXPIRED_AFTER column); "+
			"lockreg needs Spring Integration 7's, which Spring 5.x/6.x applications cannot use: stop them, "+
			"then migrate it with: %s; then call jdbc.CreateSchema or apply the scripts in lockreg's sql/%s folder, "+
			"which add lockreg's FENCE column",
			ErrUnsupportedLayout, cfg.table, strings.Join(spring6Migration(cfg), "; "), cfg.dialect)
	default:
		return tableUnknown, fmt.Errorf("%w: table %s lacks %s of Spring Integration 7's INT_LOCK, which lockreg needs "+
			"(see lockreg's sql/%s/000001_lock.up.sql)", ErrUnsupportedLayout, cfg.table, strings.Join(missing, ", "), cfg.dialect)
	}
}

// checkTable is the check of NewLockRepository and Check: nil for a
// complete table, and for a missing one when missingOK; otherwise an error
// wrapping ErrNoTable, ErrUnsupportedLayout or the database's error.
func (r *LockRepository) checkTable(ctx context.Context, what string, missingOK bool) error {
	state, err := r.inspectTable(ctx)
	switch {
	case state == tableMissing:
		if missingOK {
			return nil
		}
		return fmt.Errorf("%s: %w", what, r.noTable(err))
	case err != nil:
		return r.wrap(ctx, what, err)
	case state == tableWithoutFence:
		return fmt.Errorf("%s: %w: table %s has Spring Integration 7's layout without lockreg's FENCE column; "+
			"add it with jdbc.CreateSchema or the scripts in lockreg's sql/%s folder",
			what, ErrUnsupportedLayout, r.cfg.table, r.cfg.dialect)
	}
	return nil
}

// spring6Migration returns the statements that give a Spring Integration
// 5.x/6.x lock table Spring 7's EXPIRED_AFTER column, as Spring 7 declares
// it; the rows there are expired by then. SQLite cannot drop the default
// without rebuilding the table, so there the column keeps it.
func spring6Migration(cfg *config) []string {
	t := cfg.table
	switch cfg.dialect {
	case MySQL:
		return []string{
			`ALTER TABLE ` + t + ` ADD EXPIRED_AFTER DATETIME(6) NOT NULL DEFAULT '1970-01-01 00:00:00'`,
			`ALTER TABLE ` + t + ` ALTER COLUMN EXPIRED_AFTER DROP DEFAULT`,
		}
	case SQLite:
		return []string{`ALTER TABLE ` + t + ` ADD EXPIRED_AFTER TEXT NOT NULL DEFAULT '1970-01-01 00:00:00.000'`}
	default:
		return []string{
			`ALTER TABLE ` + t + ` ADD EXPIRED_AFTER TIMESTAMP NOT NULL DEFAULT '1970-01-01 00:00:00'`,
			`ALTER TABLE ` + t + ` ALTER COLUMN EXPIRED_AFTER DROP DEFAULT`,
		}
	}
}

// sqliteColumns returns the column names of table, none when it does not
// exist, from SQLite's catalog.
func sqliteColumns(ctx context.Context, db DB, table string) ([]string, error) {
	rows, err := db.QueryContext(ctx, `SELECT name FROM pragma_table_info(?)`, table)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var cols []string
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			return nil, err
		}
		cols = append(cols, c)
	}
	return cols, rows.Err()
}

// hasColumn reports whether the lock table has column c by selecting it,
// which fails with an undefined-column code when it is missing (not on
// SQLite, whose errors carry no such code).
func (r *LockRepository) hasColumn(ctx context.Context, c string) (bool, error) {
	err := selectNothing(ctx, r.db, `SELECT `+c+` FROM `+r.cfg.table+` WHERE 1 = 0`)
	if err != nil && isUndefinedColumn(err) {
		return false, nil
	}
	return err == nil, err
}

// selectNothing runs a query that returns no rows and reports its error.
func selectNothing(ctx context.Context, db DB, query string) error {
	rows, err := db.QueryContext(ctx, query)
	if err != nil {
		return err
	}
	for rows.Next() {
	}
	err = rows.Err()
	rows.Close()
	return err
}

// isUndefinedColumn reports PostgreSQL's undefined_column and MySQL's
// ER_BAD_FIELD_ERROR, by code.
func isUndefinedColumn(err error) bool {
	var st sqlState
	if errors.As(err, &st) && st.SQLState() == "42703" {
		return true
	}
	var my *mysql.MySQLError
	return errors.As(err, &my) && my.Number == 1054
}

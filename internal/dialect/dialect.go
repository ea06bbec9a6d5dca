// Package dialect holds everything lockreg knows of its SQL dialects: their
// clock expressions and placeholders, the statements that differ between
// them, how their drivers report errors, how their schema is applied under
// a lock, and how their drivers are recognised. Packages jdbc and
// groupstore/sqlstore pick a Dialect and stay free of dialect switches; a
// new dialect is one file here that registers a Dialect.
//
// Every statement, built in or custom, is written in one templating rule,
// compiled once by [Dialect.Compile]: {macros} the dialect expands and
// :name parameters that become positional placeholders.
package dialect

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"reflect"
)

// Dialect is one SQL dialect: its expressions, its statements (in the
// templating rule of Compile) and its peculiarities. The values are
// shared and must not be changed.
type Dialect struct {
	// Name is the dialect's name ("postgres", "mysql", "sqlite"), also
	// the folder of its scripts in package github.com/lockreg/lockreg/sql.
	Name string
	// System names the backend in metrics and logs, as OpenTelemetry's
	// db.system.name does ("postgresql", "mysql", "sqlite").
	System string

	// Lock and Group are the statements of the lock table and of the
	// message-group tables that differ between dialects.
	Lock  LockSQL
	Group GroupSQL

	// UpdateCountsTwo says that an upsert that updates a row reports two
	// affected rows (MySQL's ON DUPLICATE KEY UPDATE).
	UpdateCountsTwo bool

	// FoundRows, when not nil, reports whether the driver connection dc
	// (from sql.Conn.Raw) counts found rather than changed rows as
	// affected. Only MySQL's driver has that setting.
	FoundRows func(dc any) bool

	dollar  bool     // placeholders $1, $2, ... rather than ?
	drivers []string // package paths of the drivers that speak it

	// The macros of the templating rule (see Compile): now is the current
	// UTC wall time in the tables' time format, past a moment before it,
	// clock the current time in microseconds since 1970; plus and minus
	// surround a placeholder p so that plus[0]+p+plus[1] is now plus p
	// microseconds.
	now, past, clock string
	plus, minus      [2]string

	// tableColumns, when not nil, lists a table's columns from the
	// catalog, none for a missing table: for dialects whose errors do not
	// tell a missing table or column by code (SQLite).
	tableColumns func(ctx context.Context, q Querier, table string) ([]string, error)
	// skipScript, when not nil, reports whether a script statement is to
	// be skipped as done already (SQLite's ADD COLUMN, which has no IF NOT
	// EXISTS).
	skipScript func(ctx context.Context, q Querier, statement string) (bool, error)
	// turn runs f while no other schema application for key runs on the
	// database, on the one connection q; it reports bad when the
	// connection is left in an unknown state and must not be reused.
	turn func(ctx, end context.Context, q Querier, key string, f func() error) (bad bool, err error)
	// spring6Migration returns the statements that give a Spring
	// Integration 5.4-6.x lock table Spring 7's EXPIRED_AFTER column.
	spring6Migration func(table string) []string
}

// Querier is what statements run on: *sql.DB, *sql.Conn, *sql.Tx, or a
// jdbc.DB.
type Querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// registered are the dialects in the order their files register them.
var registered []*Dialect

func register(d *Dialect) *Dialect {
	registered = append(registered, d)
	return d
}

// Lookup returns the dialect called name, or nil.
func Lookup(name string) *Dialect {
	for _, d := range registered {
		if d.Name == name {
			return d
		}
	}
	return nil
}

// Names lists the dialects' names.
func Names() []string {
	names := make([]string, len(registered))
	for i, d := range registered {
		names[i] = d.Name
	}
	return names
}

// Detect returns the dialect of the driver drv, told by the package its
// type is declared in, or nil when no dialect knows it (a wrapped driver,
// say). It imports no driver.
func Detect(drv driver.Driver) *Dialect {
	t := reflect.TypeOf(drv)
	if t == nil {
		return nil
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	for _, d := range registered {
		for _, p := range d.drivers {
			if t.PkgPath() == p {
				return d
			}
		}
	}
	return nil
}

// Spring6Migration returns the statements that give a Spring Integration
// 5.4-6.x lock table Spring 7's EXPIRED_AFTER column, as Spring 7 declares
// it.
func (d *Dialect) Spring6Migration(table string) []string { return d.spring6Migration(table) }

// Micros returns the SQL of the time expression col (a column of UTC wall
// time) in microseconds since 1970, as a BIGINT; on SQLite, which keeps
// milliseconds, to the millisecond.
func (d *Dialect) Micros(col string) string {
	switch d.Name {
	case "postgres":
		return `CAST(EXTRACT(EPOCH FROM ` + col + `) * 1000000 AS BIGINT)`
	case "mysql":
		return `TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', ` + col + `)`
	}
	return `CAST(ROUND((julianday(` + col + `) - 2440587.5) * 86400000.0) AS INTEGER) * 1000`
}

package testdb

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/lockreg/lockreg/jdbc"
)

// Q rewrites a test query written with ? placeholders for b's dialect.
func (b Backend) Q(query string) string {
	if b.Dialect == jdbc.Postgres {
		return sqlx.Rebind(sqlx.DOLLAR, query)
	}
	return query
}

// Exec runs a test statement written with ? placeholders and fails t on
// error.
func (b Backend) Exec(t testing.TB, query string, args ...any) sql.Result {
	t.Helper()
	res, err := b.DB.ExecContext(context.Background(), b.Q(query), args...)
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return res
}

// SQLiteTime is the layout of times in SQLite's tables.
const SQLiteTime = "2006-01-02 15:04:05.000"

// SQLiteMillis is SQLite's time t (a time text or 'now') in milliseconds
// since 1970, exactly: julianday's doubles are off by up to about 40 µs, so
// they are rounded to the millisecond SQLite's times hold.
func SQLiteMillis(t string) string {
	return `CAST(ROUND((julianday(` + t + `) - 2440587.5) * 86400000.0) AS INTEGER)`
}

// Micros is the SQL of the time col (a column of UTC wall time, or an
// expression of the database's now) in microseconds since 1970, the unit of
// jdbc's fencing tokens and of Clock; on SQLite to the millisecond.
func (b Backend) Micros(col string) string {
	switch b.Dialect {
	case jdbc.Postgres:
		return `CAST(EXTRACT(EPOCH FROM ` + col + `) * 1000000 AS BIGINT)`
	case jdbc.MySQL:
		return `TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', ` + col + `)`
	default:
		return SQLiteMillis(col) + ` * 1000`
	}
}

// clock is the SQL of the database's clock in microseconds since 1970, read
// when the statement evaluates it: on PostgreSQL clock_timestamp(), not the
// transaction's start that now() is.
func (b Backend) clock() string {
	return b.Micros(map[jdbc.Dialect]string{
		jdbc.Postgres: `clock_timestamp()`,
		jdbc.MySQL:    `UTC_TIMESTAMP(6)`,
		jdbc.SQLite:   `'now'`,
	}[b.Dialect])
}

// Clock reads the database's clock in microseconds since 1970 (UTC), the
// unit of jdbc's fencing tokens; on SQLite to the millisecond. It takes no
// testing.TB, so that the tests' child processes can use it too.
func (b Backend) Clock(ctx context.Context) (int64, error) {
	var n int64
	err := b.DB.QueryRowContext(ctx, `SELECT `+b.clock()).Scan(&n)
	return n, err
}

// Now returns the database's clock (see Clock) as UTC wall time.
func (b Backend) Now(t testing.TB) time.Time {
	t.Helper()
	n, err := b.Clock(context.Background())
	if err != nil {
		t.Fatalf("reading the database's clock: %v", err)
	}
	return time.UnixMicro(n).UTC()
}

// At converts a time to a parameter of b's time columns.
func (b Backend) At(t time.Time) any {
	if b.Dialect == jdbc.SQLite {
		return t.UTC().Format(SQLiteTime)
	}
	return t.UTC()
}

// InsertRows inserts rows into table's columns, 200 rows per statement.
func (b Backend) InsertRows(t testing.TB, table string, columns []string, rows [][]any) {
	t.Helper()
	one := "(?" + strings.Repeat(", ?", len(columns)-1) + ")"
	for len(rows) > 0 {
		n := min(len(rows), 200)
		var args []any
		for _, r := range rows[:n] {
			args = append(args, r...)
		}
		b.Exec(t, `INSERT INTO `+table+` (`+strings.Join(columns, ", ")+`) VALUES `+one+strings.Repeat(", "+one, n-1), args...)
		rows = rows[n:]
	}
}

// CountRows counts the rows of table in region whose key column starts
// with prefix.
func (b Backend) CountRows(t testing.TB, table, keyColumn, region, prefix string) int {
	t.Helper()
	var n int
	err := b.DB.QueryRowContext(context.Background(),
		b.Q(`SELECT COUNT(*) FROM `+table+` WHERE REGION = ? AND `+keyColumn+` LIKE ?`), region, prefix+"%").Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// WaitFor polls cond until it holds, failing t after two minutes (the
// SQLite clean-up of large tests is slow under -race on busy cores).
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond) // a poll on SQLite scans the tables
	}
}

// InsertSpringRow writes a row the way Spring Integration's
// DefaultLockRepository does: the application's clock, UTC wall time, bound
// as parameters.
func (db Backend) InsertSpringRow(t testing.TB, table, region, lockKey, clientID string, created, expires time.Time) {
	t.Helper()
	var c, e any = created.UTC(), expires.UTC()
	if db.Dialect == jdbc.SQLite {
		c, e = created.UTC().Format(SQLiteTime), expires.UTC().Format(SQLiteTime)
	}
	db.Exec(t, `INSERT INTO `+table+` (REGION, LOCK_KEY, CLIENT_ID, CREATED_DATE, EXPIRED_AFTER) VALUES (?, ?, ?, ?, ?)`,
		region, lockKey, clientID, c, e)
}

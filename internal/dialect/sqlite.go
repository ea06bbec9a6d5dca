package dialect

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// sqliteNow begins SQLite's current UTC time as text in the tables'
// format: strftime modifiers may follow, and then ")". 'now' is fixed for
// the duration of one statement.
const (
	sqliteFormat = `'%Y-%m-%d %H:%M:%f'`
	sqliteNow    = `strftime(` + sqliteFormat + `, 'now'`
)

// SQLite is SQLite 3.24 or later (upsert), with modernc.org/sqlite or
// mattn/go-sqlite3.
var SQLite = register(&Dialect{
	Name:    "sqlite",
	System:  "sqlite",
	drivers: []string{"modernc.org/sqlite", "github.com/mattn/go-sqlite3"},

	now:  sqliteNow + `)`,
	past: sqliteNow + `, '-0.001 seconds')`,
	// Exactly the whole milliseconds 'now' holds, times 1000, the instant
	// of the statement's CREATED_DATE text. julianday('now') is a double
	// whose unit in the last place is about 40 µs, so it is rounded to the
	// millisecond it stands for; without the rounding a token could lie
	// after the acquisition, and a lockAtLeastFor measured from it ended late.
	clock: `CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000`,
	plus:  [2]string{sqliteNow + `, printf('%.6f seconds', `, ` / 1000000.0))`},
	minus: [2]string{sqliteNow + `, printf('%.6f seconds', -`, ` / 1000000.0))`},

	Lock: LockSQL{
		Acquire: `INSERT INTO {prefix}LOCK (LOCK_KEY, REGION, CLIENT_ID, CREATED_DATE, EXPIRED_AFTER, FENCE, LOCK_NAME, HOLDER) ` +
			`VALUES (:lock_key, :region, :client_id, {now}, {now+:ttl}, {clock}, :lock_name, :holder) ` +
			`ON CONFLICT (LOCK_KEY, REGION) DO UPDATE SET CLIENT_ID = excluded.CLIENT_ID, EXPIRED_AFTER = excluded.EXPIRED_AFTER, ` +
			`FENCE = max({prefix}LOCK.FENCE + 1, excluded.FENCE), HOLDER = excluded.HOLDER, ` +
			`LOCK_NAME = coalesce({prefix}LOCK.LOCK_NAME, excluded.LOCK_NAME) ` +
			`WHERE {prefix}LOCK.CLIENT_ID = excluded.CLIENT_ID OR {prefix}LOCK.EXPIRED_AFTER < excluded.CREATED_DATE ` +
			`RETURNING FENCE`,
		TokenRow: true,
		Renew: `UPDATE {prefix}LOCK SET EXPIRED_AFTER = {now+:ttl} ` +
			`WHERE REGION = :region AND LOCK_KEY = :lock_key AND CLIENT_ID = :client_id AND EXPIRED_AFTER >= {now}`,
		// SQLite keeps milliseconds: FENCE + ttl is rounded up to the next
		// one, in integer arithmetic, so that the lock never ends before
		// acquisition + lockAtLeastFor and not a millisecond later
		// (strftime rounds a fractional unixepoch to the nearest
		// millisecond, and a whole number of milliseconds divided by 1000.0
		// stays closest to itself). The times are text in one format, so
		// max and min compare them correctly.
		ReleaseAfter: `UPDATE {prefix}LOCK SET EXPIRED_AFTER = max({now}, min(` +
			`strftime(` + sqliteFormat + `, ((FENCE + :ttl + 999) / 1000) / 1000.0, 'unixepoch'), {now+:ttl})), CLIENT_ID = NULL ` +
			`WHERE REGION = :region AND LOCK_KEY = :lock_key AND CLIENT_ID = :client_id`,
		Sweep: `DELETE FROM {prefix}LOCK WHERE rowid IN (SELECT rowid FROM {prefix}LOCK WHERE ` + DeadLock + ` LIMIT :batch)`,
	},

	// SQLite has one writer at a time: nothing to skip.
	Group: GroupSQL{
		Upsert:        upsertGroupReturning,
		InsertMessage: insertMessageUnlessThere,
		LockRow:       `UPDATE {prefix}GROUP SET VERSION = VERSION WHERE GROUP_KEY = :group_key AND REGION = :region`,
		SweepMessages: `DELETE FROM {prefix}GROUP_MESSAGE WHERE rowid IN (SELECT m.rowid FROM {prefix}GROUP_MESSAGE m ` +
			`JOIN {prefix}GROUP g ON g.GROUP_KEY = m.GROUP_KEY AND g.REGION = m.REGION WHERE ` + finished("g") + ` LIMIT :batch)`,
		SweepGroups: `DELETE FROM {prefix}GROUP WHERE rowid IN (SELECT g.rowid FROM {prefix}GROUP g WHERE ` + finished("g") +
			` AND NOT EXISTS (SELECT 1 FROM {prefix}GROUP_MESSAGE m WHERE m.GROUP_KEY = g.GROUP_KEY AND m.REGION = g.REGION) LIMIT :batch)`,
	},

	// SQLite's errors tell neither a missing table nor a missing column by
	// code: its catalog does.
	tableColumns: func(ctx context.Context, q Querier, table string) ([]string, error) {
		return Strings(q.QueryContext(ctx, `SELECT name FROM pragma_table_info(?)`, table))
	},
	skipScript: sqliteColumnAdded,
	// One writer at a time: BEGIN IMMEDIATE waits as busy_timeout says,
	// and then as ctx allows; the statements run in that transaction.
	turn: func(ctx, end context.Context, q Querier, key string, f func() error) (bool, error) {
		var err error
		for wait := 5 * time.Millisecond; ; wait = min(2*wait, 200*time.Millisecond) {
			if _, err = q.ExecContext(ctx, `BEGIN IMMEDIATE`); err == nil || !IsTransient(err) {
				break
			}
			select {
			case <-ctx.Done():
				return false, fmt.Errorf("%w: %w", ctx.Err(), err)
			case <-time.After(wait):
			}
		}
		if err != nil {
			return false, err
		}
		return commitOrRollback(ctx, end, q, f)
	},
	// SQLite cannot drop the default without rebuilding the table, so
	// there the column keeps it.
	spring6Migration: func(t string) []string {
		return []string{`ALTER TABLE ` + t + ` ADD EXPIRED_AFTER TEXT NOT NULL DEFAULT '1970-01-01 00:00:00.000'`}
	},
})

// addColumn matches the scripts' statements that add a column without IF
// NOT EXISTS (SQLite has none).
var addColumn = regexp.MustCompile(`(?i)^ALTER\s+TABLE\s+(\w+)\s+ADD\s+(?:COLUMN\s+)?(\w+)\s`)

// sqliteColumnAdded reports whether statement adds a column that exists
// already, from SQLite's catalog.
func sqliteColumnAdded(ctx context.Context, q Querier, statement string) (bool, error) {
	m := addColumn.FindStringSubmatch(statement)
	if m == nil || strings.EqualFold(m[2], "IF") {
		return false, nil
	}
	var n int
	err := q.QueryRowContext(ctx, `SELECT COUNT(*) FROM pragma_table_info(?) WHERE name = ? COLLATE NOCASE`, m[1], m[2]).Scan(&n)
	return n > 0, err
}

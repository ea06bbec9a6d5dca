package shedlock_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lockreg/lockreg/internal/testdb"
	"github.com/lockreg/lockreg/jdbc"
)

// javaShedLock replays ShedLock's JdbcTemplateLockProvider
// (StorageBasedLockProvider over JdbcTemplateStorageAccessor) statement
// for statement: its SQL statement source for the product and mode, named
// parameters in their order, each statement in its own REQUIRES_NEW
// transaction at the database's default isolation, the record cache of
// names it has inserted, and the parameter types it binds: in
// application time, timestamps as wall times of the JVM's zone (a
// Calendar of TimeZone.getDefault(), or UTC with forceUtcTimeZone); in
// database time, PostgreSQL's durations as seconds with millisecond scale
// (BigDecimal, bound here as its text) and MySQL's as microseconds (long).
type javaShedLock struct {
	db       testdb.Backend
	table    string
	lockedBy string
	dbTime   bool
	zone     *time.Location // the JVM's zone, for application time
	inserted map[string]bool
	clock    func() time.Time // ClockProvider.now(); default time.Now
}

// javaLock is ShedLock's LockConfiguration of an acquired lock.
type javaLock struct {
	name               string
	createdAt          time.Time
	atMostFor, atLeast time.Duration
}

func newJava(db testdb.Backend, table string, dbTime bool, zone *time.Location) *javaShedLock {
	if zone == nil {
		zone = time.UTC
	}
	return &javaShedLock{db: db, table: table, lockedBy: "java-host", dbTime: dbTime, zone: zone, inserted: map[string]bool{}}
}

func (j *javaShedLock) now() time.Time {
	if j.clock != nil {
		return j.clock().Truncate(time.Millisecond)
	}
	return time.Now().Truncate(time.Millisecond)
}

// ts binds an instant as JDBC's setTimestamp(ts, calendar of the zone) does:
// its wall time in the zone.
func (j *javaShedLock) ts(t time.Time) any {
	w := t.In(j.zone)
	u := time.Date(w.Year(), w.Month(), w.Day(), w.Hour(), w.Minute(), w.Second(), w.Nanosecond(), time.UTC)
	if j.db.Dialect == jdbc.Postgres {
		return u
	}
	return u.Format("2006-01-02 15:04:05.000")
}

// statements returns ShedLock's statements for the product, with named
// parameters replaced by placeholders in order, and the parameters'
// names.
func (j *javaShedLock) statements() (insert, update, unlock, extend string) {
	t := j.table
	pg := j.db.Dialect == jdbc.Postgres
	switch {
	case !j.dbTime && pg: // PostgresSqlStatementsSource
		insert = `INSERT INTO ` + t + `(name, lock_until, locked_at, locked_by) VALUES(:name, :lockUntil, :now, :lockedBy) ` +
			`ON CONFLICT (name) DO UPDATE SET lock_until = :lockUntil, locked_at = :now, locked_by = :lockedBy WHERE ` + t + `.lock_until <= :now`
	case !j.dbTime: // SqlStatementsSource (generic)
		insert = `INSERT INTO ` + t + `(name, lock_until, locked_at, locked_by) VALUES(:name, :lockUntil, :now, :lockedBy)`
	}
	if !j.dbTime {
		update = `UPDATE ` + t + ` SET lock_until = :lockUntil, locked_at = :now, locked_by = :lockedBy WHERE name = :name AND lock_until <= :now`
		unlock = `UPDATE ` + t + ` SET lock_until = :unlockTime WHERE name = :name AND locked_by = :lockedBy`
		extend = `UPDATE ` + t + ` SET lock_until = :lockUntil WHERE name = :name AND locked_by = :lockedBy AND lock_until > :now`
		return
	}
	if pg { // PostgresSqlServerTimeStatementsSource
		now := `timezone('utc', CURRENT_TIMESTAMP)`
		atMost := now + ` + make_interval(secs => :lockAtMostForInterval)`
		atLeast := `locked_at + make_interval(secs => :lockAtLeastForInterval)`
		set := ` SET lock_until = ` + atMost + `, locked_at = ` + now + `, locked_by = :lockedBy WHERE ` + t + `.name = :name AND ` + t + `.lock_until <= ` + now
		insert = `INSERT INTO ` + t + `(name, lock_until, locked_at, locked_by) VALUES(:name, ` + atMost + `, ` + now + `, :lockedBy)` +
			` ON CONFLICT (name) DO UPDATE` + set
		update = `UPDATE ` + t + set
		unlock = `UPDATE ` + t + ` SET lock_until = CASE WHEN ` + atLeast + ` > ` + now + ` THEN ` + atLeast + ` ELSE ` + now +
			` END WHERE name = :name AND locked_by = :lockedBy`
		extend = `UPDATE ` + t + ` SET lock_until = ` + atMost + ` WHERE name = :name AND locked_by = :lockedBy AND lock_until > ` + now
		return
	}
	// MySqlServerTimeStatementsSource
	now := `UTC_TIMESTAMP(3)`
	atMost := `TIMESTAMPADD(MICROSECOND, :lockAtMostForMicros, ` + now + `)`
	atLeast := `TIMESTAMPADD(MICROSECOND, :lockAtLeastForMicros, locked_at)`
	insert = `INSERT IGNORE INTO ` + t + `(name, lock_until, locked_at, locked_by) VALUES(:name, ` + atMost + `, ` + now + `, :lockedBy)`
	update = `UPDATE ` + t + ` SET lock_until = ` + atMost + `, locked_at = ` + now + `, locked_by = :lockedBy WHERE name = :name AND lock_until <= ` + now
	unlock = `UPDATE ` + t + ` SET lock_until = IF (` + atLeast + ` > ` + now + `, ` + atLeast + `, ` + now + `) WHERE name = :name AND locked_by = :lockedBy`
	extend = `UPDATE ` + t + ` SET lock_until = ` + atMost + ` WHERE name = :name AND locked_by = :lockedBy AND lock_until > ` + now
	return
}

// exec runs one named statement in a transaction of its own, as
// TransactionTemplate with PROPAGATION_REQUIRES_NEW does, and returns the
// update count.
func (j *javaShedLock) exec(ctx context.Context, named string, params map[string]any) (int64, error) {
	var args []any
	var b strings.Builder
	n := 0
	for i := 0; i < len(named); i++ {
		if named[i] == ':' && i+1 < len(named) && isLetter(named[i+1]) {
			k := i + 1
			for k < len(named) && (isLetter(named[k]) || named[k] >= '0' && named[k] <= '9') {
				k++
			}
			v, ok := params[named[i+1:k]]
			if !ok {
				panic("no parameter " + named[i+1:k])
			}
			args = append(args, v)
			n++
			if j.db.Dialect == jdbc.Postgres {
				fmt.Fprintf(&b, "$%d", n)
			} else {
				b.WriteByte('?')
			}
			i = k - 1
			continue
		}
		b.WriteByte(named[i])
	}
	tx, err := j.db.DB.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	res, err := tx.ExecContext(ctx, b.String(), args...)
	if err != nil {
		tx.Rollback()
		return 0, err
	}
	if err := tx.Commit(); err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func isLetter(c byte) bool { return c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }

func (j *javaShedLock) params(c javaLock) map[string]any {
	now := j.now()
	unlockTime := now
	if u := c.createdAt.Add(c.atLeast); u.After(now) {
		unlockTime = u
	}
	return map[string]any{
		"name": c.name, "lockedBy": j.lockedBy,
		"now": j.ts(now), "lockUntil": j.ts(c.createdAt.Add(c.atMostFor)), "unlockTime": j.ts(unlockTime),
		"lockAtMostForInterval":  fmt.Sprintf("%.3f", c.atMostFor.Seconds()),
		"lockAtLeastForInterval": fmt.Sprintf("%.3f", c.atLeast.Seconds()),
		"lockAtMostForMicros":    c.atMostFor.Microseconds(),
		"lockAtLeastForMicros":   c.atLeast.Microseconds(),
	}
}

// isDuplicate is Spring's DuplicateKeyException: SQLState 23505, MySQL 1062.
func isDuplicate(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "23505") || strings.Contains(err.Error(), "1062"))
}

// lock is StorageBasedLockProvider.lock: insert unless the name is in the
// record cache, then update; a duplicate key or concurrency failure counts
// as not acquired.
func (j *javaShedLock) lock(t testing.TB, name string, atMost, atLeast time.Duration) (*javaLock, bool) {
	t.Helper()
	c := javaLock{name: name, createdAt: j.now(), atMostFor: atMost, atLeast: atLeast}
	insert, update, _, _ := j.statements()
	ctx := context.Background()
	if !j.inserted[name] {
		n, err := j.exec(ctx, insert, j.params(c))
		if err != nil && !isDuplicate(err) && !isConcurrency(err) {
			t.Fatalf("java insert: %v", err)
		}
		j.inserted[name] = true
		if err == nil && n > 0 {
			return &c, true
		}
	}
	n, err := j.exec(ctx, update, j.params(c))
	if err != nil && !isConcurrency(err) {
		t.Fatalf("java update: %v", err)
	}
	return &c, err == nil && n > 0
}

// isConcurrency is Spring's ConcurrencyFailureException: serialization
// failures and deadlocks.
func isConcurrency(err error) bool {
	if err == nil {
		return false
	}
	s := err.Error()
	return strings.Contains(s, "40001") || strings.Contains(s, "40P01") || strings.Contains(s, "1213") || strings.Contains(s, "1205")
}

// unlock is StorageLock.unlock, which ShedLock retries on concurrency
// failures; it reports whether the row was this client's.
func (j *javaShedLock) unlock(t testing.TB, c *javaLock) bool {
	t.Helper()
	_, _, unlock, _ := j.statements()
	for i := 0; ; i++ {
		n, err := j.exec(context.Background(), unlock, j.params(*c))
		if err == nil {
			return n > 0
		}
		if !isConcurrency(err) || i == 9 {
			t.Fatalf("java unlock: %v", err)
		}
	}
}

// extend is StorageLock.extend with a new configuration created now.
func (j *javaShedLock) extend(t testing.TB, c *javaLock, atMost time.Duration) bool {
	t.Helper()
	_, _, _, extend := j.statements()
	n, err := j.exec(context.Background(), extend, j.params(javaLock{name: c.name, createdAt: j.now(), atMostFor: atMost}))
	if err != nil {
		t.Fatalf("java extend: %v", err)
	}
	return n > 0
}

var errNoRow = errors.New("no row")

// shedRow is a row of a ShedLock table read with the database's clock:
// lock_until and locked_at in milliseconds of wall time, and the wall-time
// milliseconds of the database's UTC clock.
type shedRow struct {
	lockUntil, lockedAt, dbNow int64
	lockedBy                   string
}

func readRow(t testing.TB, db testdb.Backend, table, name string) (shedRow, error) {
	t.Helper()
	var r shedRow
	var q string
	switch db.Dialect {
	case jdbc.Postgres:
		ms := func(c string) string { return `CAST(EXTRACT(EPOCH FROM ` + c + `) * 1000 AS BIGINT)` }
		q = `SELECT ` + ms(`lock_until`) + `, ` + ms(`locked_at`) + `, ` + ms(`timezone('utc', clock_timestamp())`) + `, locked_by FROM ` + table + ` WHERE name = $1`
	case jdbc.MySQL:
		ms := func(c string) string {
			return `CAST(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', ` + c + `) / 1000 AS SIGNED)`
		}
		q = `SELECT ` + ms(`lock_until`) + `, ` + ms(`locked_at`) + `, ` + ms(`UTC_TIMESTAMP(6)`) + `, locked_by FROM ` + table + ` WHERE name = ?`
	default:
		q = `SELECT ` + testdb.SQLiteMillis(`lock_until`) + `, ` + testdb.SQLiteMillis(`locked_at`) + `, ` + testdb.SQLiteMillis(`'now'`) +
			`, locked_by FROM ` + table + ` WHERE name = ?`
	}
	err := db.DB.QueryRowContext(context.Background(), q, name).Scan(&r.lockUntil, &r.lockedAt, &r.dbNow, &r.lockedBy)
	if errors.Is(err, sql.ErrNoRows) {
		return r, errNoRow
	}
	if err != nil {
		t.Fatalf("reading the row of %q: %v", name, err)
	}
	return r, nil
}

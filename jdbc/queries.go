package jdbc

import (
	"fmt"
	"strings"

	"github.com/jmoiron/sqlx"
)

// Named parameters of the lock queries. Custom queries (WithAcquireQuery,
// WithRenewQuery, WithReleaseQuery) may use any of them.
const (
	paramLockKey  = "lock_key"  // the mapped key (a UUID by default)
	paramRegion   = "region"    // the repository's region
	paramClientID = "client_id" // the repository's client id
	paramTTL      = "ttl"       // the lease length in microseconds, an int64
	paramWait     = "wait"      // how long a place in the queue lasts, in microseconds
	paramChannel  = "channel"   // the PostgreSQL notification channel of the table and region

	// The clean-up's parameters, not offered to custom queries.
	paramRetention = "retention" // how long a dead row is kept, in microseconds
	paramBatch     = "batch"     // the most rows a statement deletes
)

// dialectSQL holds the default queries of one dialect, in sqlx named form,
// with %s standing for the table prefix.
//
// Acquire also issues the fencing token, in the same statement: the
// database's clock in microseconds since 1970, or the row's last token plus
// one if that is greater. Tokens of a key therefore increase while its row
// exists, and after the row is deleted they restart from the clock, above
// every earlier token as long as the database's clock does not step back
// by more than the time since the earlier acquisition. PostgreSQL and
// SQLite return it with RETURNING; MySQL through LAST_INSERT_ID(expr),
// which the server sends back with the statement's result.
type dialectSQL struct {
	acquire, renew string
	// now is the database's current UTC wall time in the table's time format;
	// past is a moment before it, the expiry a release writes; ago is now
	// minus :retention microseconds.
	now, past, ago string
	// clock is the database's clock in microseconds since 1970, from which
	// the acquire statement issues tokens.
	clock string
	// sweep deletes at most :batch dead rows of the region (deadLock); on
	// MySQL it is a SELECT of their keys, and sweepKeys, completed with a
	// list of those keys, deletes them.
	sweep, sweepKeys string
}

// pgAcquire is PostgreSQL's acquire statement. A lease that is this
// client's (taken before, or handed over by a release) it extends; an
// expired one it takes only when no live waiter is ahead in the queue.
var pgAcquire = `INSERT INTO %sLOCK (LOCK_KEY, REGION, CLIENT_ID, CREATED_DATE, EXPIRED_AFTER, FENCE) ` +
	`VALUES (:lock_key, :region, :client_id, timezone('UTC', now()), ` +
	`timezone('UTC', now()) + CAST(:ttl AS BIGINT) * INTERVAL '1 microsecond', ` +
	pgNowMicros + `) ` +
	`ON CONFLICT (LOCK_KEY, REGION) DO UPDATE SET CLIENT_ID = EXCLUDED.CLIENT_ID, EXPIRED_AFTER = EXCLUDED.EXPIRED_AFTER, ` +
	`FENCE = GREATEST(%sLOCK.FENCE + 1, EXCLUDED.FENCE) ` +
	`WHERE (%sLOCK.CLIENT_ID = EXCLUDED.CLIENT_ID AND %sLOCK.EXPIRED_AFTER >= EXCLUDED.CREATED_DATE) ` +
	`OR (%sLOCK.EXPIRED_AFTER < EXCLUDED.CREATED_DATE AND NOT EXISTS (` + pgAhead + `)) ` +
	`RETURNING FENCE`

// pgAhead finds, within an ON CONFLICT clause, a live waiter of another
// client that began to wait before this one (or before now, if this one is
// not waiting): while there is one, the lease is not this client's to take.
const pgAhead = `SELECT 1 FROM %sLOCK_WAIT o WHERE o.LOCK_KEY = EXCLUDED.LOCK_KEY AND o.REGION = EXCLUDED.REGION ` +
	`AND o.CLIENT_ID <> EXCLUDED.CLIENT_ID AND o.WAITING_UNTIL >= EXCLUDED.CREATED_DATE ` +
	`AND o.WAITING_SINCE < COALESCE((SELECT m.WAITING_SINCE FROM %sLOCK_WAIT m WHERE m.LOCK_KEY = EXCLUDED.LOCK_KEY ` +
	`AND m.REGION = EXCLUDED.REGION AND m.CLIENT_ID = EXCLUDED.CLIENT_ID AND m.WAITING_UNTIL >= EXCLUDED.CREATED_DATE), ` +
	`EXCLUDED.CREATED_DATE)`

// PostgreSQL's queue: acquireOrWait is the default acquire statement (a)
// that also leaves the queue when it takes the lease (d) or joins it, or
// keeps its place, when it does not (w); release announces the release to
// the queue's listeners when somebody waits. Both stay one statement.
var (
	pgAcquireOrWait = `WITH a AS (` + pgAcquire + `), ` +
		`d AS (DELETE FROM %sLOCK_WAIT WHERE LOCK_KEY = :lock_key AND REGION = :region AND CLIENT_ID = :client_id ` +
		`AND EXISTS (SELECT 1 FROM a)), ` +
		`w AS (INSERT INTO %sLOCK_WAIT (LOCK_KEY, REGION, CLIENT_ID, WAITING_SINCE, WAITING_UNTIL, LEASE_MICROS) ` +
		`SELECT :lock_key, :region, :client_id, NOW, NOW + CAST(:wait AS BIGINT) * INTERVAL '1 microsecond', :ttl ` +
		`WHERE NOT EXISTS (SELECT 1 FROM a) ` +
		`ON CONFLICT (LOCK_KEY, REGION, CLIENT_ID) DO UPDATE SET WAITING_UNTIL = EXCLUDED.WAITING_UNTIL, ` +
		`LEASE_MICROS = EXCLUDED.LEASE_MICROS, ` +
		`WAITING_SINCE = CASE WHEN %sLOCK_WAIT.WAITING_UNTIL < EXCLUDED.WAITING_SINCE ` +
		`THEN EXCLUDED.WAITING_SINCE ELSE %sLOCK_WAIT.WAITING_SINCE END) ` +
		`SELECT FENCE FROM a`
	// pgRelease hands the lease to the first live waiter (nx), if any, for
	// the lease length it asked for, with a new token, takes it out of the
	// queue and tells it by NOTIFY ("LOCK_KEY CLIENT_ID"); otherwise it
	// expires the row in place.
	pgRelease = `WITH nx AS (SELECT w.CLIENT_ID, w.LEASE_MICROS FROM %sLOCK_WAIT w ` +
		`WHERE w.LOCK_KEY = :lock_key AND w.REGION = :region AND w.CLIENT_ID <> :client_id ` +
		`AND w.WAITING_UNTIL >= NOW AND w.LEASE_MICROS > 0 ORDER BY w.WAITING_SINCE, w.CLIENT_ID LIMIT 1), ` +
		`r AS (UPDATE %sLOCK l SET CLIENT_ID = COALESCE((SELECT CLIENT_ID FROM nx), l.CLIENT_ID), ` +
		`EXPIRED_AFTER = COALESCE(NOW + (SELECT LEASE_MICROS FROM nx) * INTERVAL '1 microsecond', PAST), ` +
		`FENCE = CASE WHEN EXISTS (SELECT 1 FROM nx) ` +
		`THEN GREATEST(l.FENCE + 1, ` + pgNowMicros + `) ELSE l.FENCE END ` +
		`WHERE l.REGION = :region AND l.LOCK_KEY = :lock_key AND l.CLIENT_ID = :client_id RETURNING l.LOCK_KEY), ` +
		`d AS (DELETE FROM %sLOCK_WAIT w USING nx, r WHERE w.LOCK_KEY = :lock_key AND w.REGION = :region ` +
		`AND w.CLIENT_ID = nx.CLIENT_ID) ` +
		`SELECT count(*) FROM r LEFT JOIN LATERAL (SELECT pg_notify(CAST(:channel AS TEXT), ` +
		`CAST(r.LOCK_KEY AS TEXT) || ' ' || CAST(nx.CLIENT_ID AS TEXT)) FROM nx) n ON true`
	// pgClaim reads a lease handed to this client by its previous holder.
	pgClaim = `SELECT FENCE, CAST(EXTRACT(EPOCH FROM (EXPIRED_AFTER - NOW)) * 1000000 AS BIGINT) FROM %sLOCK ` +
		`WHERE REGION = :region AND LOCK_KEY = :lock_key AND CLIENT_ID = :client_id AND EXPIRED_AFTER > NOW`
	// pgLeave leaves the queue and gives back a lease handed over
	// meanwhile, which this client no longer wants.
	pgLeave = `WITH d AS (DELETE FROM %sLOCK_WAIT WHERE LOCK_KEY = :lock_key AND REGION = :region AND CLIENT_ID = :client_id), ` +
		`r AS (UPDATE %sLOCK SET EXPIRED_AFTER = PAST WHERE REGION = :region AND LOCK_KEY = :lock_key ` +
		`AND CLIENT_ID = :client_id AND EXPIRED_AFTER > NOW) SELECT 1`
	// pgSweepWaiters deletes at most :batch lapsed places in the queue:
	// nobody is served or ahead from a lapsed place, and a waiter that asks
	// again starts a new one.
	pgSweepWaiters = `DELETE FROM %sLOCK_WAIT WHERE (LOCK_KEY, REGION, CLIENT_ID) IN (` +
		`SELECT LOCK_KEY, REGION, CLIENT_ID FROM %sLOCK_WAIT WHERE REGION = :region AND WAITING_UNTIL < NOW ` +
		`LIMIT :batch FOR UPDATE SKIP LOCKED)`
)

// pgNowMicros and mysqlNowMicros are the database's clock in microseconds
// since 1970, as the acquire statements issue tokens from it.
const (
	pgNowMicros    = `CAST(EXTRACT(EPOCH FROM now()) * 1000000 AS BIGINT)`
	mysqlNowMicros = `TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00::00::00', UTC_TIMESTAMP(6))`
)

// deadLock is the clean-up's condition for a row of the lock table that
// nothing needs: its lease expired more than the retention ago, and its
// token is more than the retention behind the clock, so that the token
// the next acquisition takes from the clock is greater unless the clock
// steps back by more than the retention meanwhile. The second half keeps
// a row whose token ran ahead of the clock (after the clock stepped back)
// until the clock has passed it.
const deadLock = `REGION = :region AND EXPIRED_AFTER < AGO AND FENCE < CLOCK - :retention`

// sqliteNowMicros is SQLite's clock in microseconds since 1970: exactly the
// whole milliseconds its 'now' holds, times 1000, the instant of the
// statement's CREATED_DATE text. julianday('now') is a double whose unit in
// the last place is about 40 µs, so it is rounded to the millisecond it
// stands for; without the rounding a token could lie after the acquisition,
// and a lockAtLeastFor measured from it ended late.
const sqliteNowMicros = `CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000`

var defaultSQL = map[Dialect]dialectSQL{
	Postgres: {
		// ON CONFLICT waits for a racing insert of the same key to commit and
		// then evaluates the WHERE against the committed row, so contention
		// yields 0 rows instead of a duplicate-key error.
		acquire: pgAcquire,
		renew: `UPDATE %sLOCK SET EXPIRED_AFTER = timezone('UTC', now()) + CAST(:ttl AS BIGINT) * INTERVAL '1 microsecond' ` +
			`WHERE REGION = :region AND LOCK_KEY = :lock_key AND CLIENT_ID = :client_id AND EXPIRED_AFTER >= timezone('UTC', now())`,
		now:   `timezone('UTC', now())`,
		past:  `timezone('UTC', now()) - INTERVAL '1 microsecond'`,
		ago:   `timezone('UTC', now()) - CAST(:retention AS BIGINT) * INTERVAL '1 microsecond'`,
		clock: pgNowMicros,
		// SKIP LOCKED passes over rows an acquisition is writing; the
		// locked rows' conditions are checked again on their latest version.
		sweep: `DELETE FROM %sLOCK WHERE (LOCK_KEY, REGION) IN (SELECT LOCK_KEY, REGION FROM %sLOCK ` +
			`WHERE ` + deadLock + ` LIMIT :batch FOR UPDATE SKIP LOCKED)`,
	},
	MySQL: {
		// MySQL evaluates the assignments left to right: the second sees the
		// CLIENT_ID the first has just set, so EXPIRED_AFTER moves only when
		// the row is (now) ours. Rows affected: 1 inserted, 2 updated, 0
		// unchanged, but 1 unchanged with clientFoundRows=true. So the
		// outcome is read from LAST_INSERT_ID, which the server returns with
		// the result: the token when the lock was taken, and 0 when it was
		// not, which the otherwise idle IF sets, as the VALUES row has set
		// it to the clock already.
		acquire: `INSERT INTO %sLOCK (LOCK_KEY, REGION, CLIENT_ID, CREATED_DATE, EXPIRED_AFTER, FENCE) ` +
			`VALUES (:lock_key, :region, :client_id, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) + INTERVAL :ttl MICROSECOND, ` +
			`LAST_INSERT_ID(` + mysqlNowMicros + `)) ` +
			`ON DUPLICATE KEY UPDATE ` +
			`CLIENT_ID = IF(CLIENT_ID = VALUES(CLIENT_ID) OR EXPIRED_AFTER < VALUES(CREATED_DATE), VALUES(CLIENT_ID), CLIENT_ID), ` +
			`EXPIRED_AFTER = IF(CLIENT_ID = VALUES(CLIENT_ID), VALUES(EXPIRED_AFTER), EXPIRED_AFTER), ` +
			`FENCE = IF(CLIENT_ID = VALUES(CLIENT_ID), LAST_INSERT_ID(GREATEST(FENCE + 1, VALUES(FENCE))), ` +
			`IF(LAST_INSERT_ID(0) = 0, FENCE, FENCE))`,
		renew: `UPDATE %sLOCK SET EXPIRED_AFTER = UTC_TIMESTAMP(6) + INTERVAL :ttl MICROSECOND ` +
			`WHERE REGION = :region AND LOCK_KEY = :lock_key AND CLIENT_ID = :client_id AND EXPIRED_AFTER >= UTC_TIMESTAMP(6)`,
		now:   `UTC_TIMESTAMP(6)`,
		past:  `UTC_TIMESTAMP(6) - INTERVAL 1 MICROSECOND`,
		ago:   `UTC_TIMESTAMP(6) - INTERVAL :retention MICROSECOND`,
		clock: mysqlNowMicros,
		// Without an index on EXPIRED_AFTER a DELETE ... LIMIT would scan,
		// and under REPEATABLE READ lock, every row it passes, live leases
		// included. The SELECT is a consistent read that locks nothing; the
		// DELETE then locks only the keys it names, and checks them again.
		sweep:     `SELECT LOCK_KEY FROM %sLOCK WHERE ` + deadLock + ` LIMIT :batch`,
		sweepKeys: `DELETE FROM %sLOCK WHERE ` + deadLock + ` AND LOCK_KEY IN `,
	},
	SQLite: {
		// 'now' is fixed for the duration of one statement. The colons of the
		// time format are doubled because sqlx reads ":name" as a parameter.
		acquire: `INSERT INTO %sLOCK (LOCK_KEY, REGION, CLIENT_ID, CREATED_DATE, EXPIRED_AFTER, FENCE) ` +
			`VALUES (:lock_key, :region, :client_id, strftime('%Y-%m-%d %H::%M::%f', 'now'), ` +
			`strftime('%Y-%m-%d %H::%M::%f', 'now', printf('%.6f seconds', :ttl / 1000000.0)), ` +
			sqliteNowMicros + `) ` +
			`ON CONFLICT (LOCK_KEY, REGION) DO UPDATE SET CLIENT_ID = excluded.CLIENT_ID, EXPIRED_AFTER = excluded.EXPIRED_AFTER, ` +
			`FENCE = max(%sLOCK.FENCE + 1, excluded.FENCE) ` +
			`WHERE %sLOCK.CLIENT_ID = excluded.CLIENT_ID OR %sLOCK.EXPIRED_AFTER < excluded.CREATED_DATE ` +
			`RETURNING FENCE`,
		renew: `UPDATE %sLOCK SET EXPIRED_AFTER = strftime('%Y-%m-%d %H::%M::%f', 'now', printf('%.6f seconds', :ttl / 1000000.0)) ` +
			`WHERE REGION = :region AND LOCK_KEY = :lock_key AND CLIENT_ID = :client_id ` +
			`AND EXPIRED_AFTER >= strftime('%Y-%m-%d %H::%M::%f', 'now')`,
		now:   `strftime('%Y-%m-%d %H::%M::%f', 'now')`,
		past:  `strftime('%Y-%m-%d %H::%M::%f', 'now', '-0.001 seconds')`,
		ago:   `strftime('%Y-%m-%d %H::%M::%f', 'now', printf('%.6f seconds', -:retention / 1000000.0))`,
		clock: sqliteNowMicros,
		sweep: `DELETE FROM %sLOCK WHERE rowid IN (SELECT rowid FROM %sLOCK WHERE ` + deadLock + ` LIMIT :batch)`,
	},
}

// Release expires the row in place instead of deleting it, so that the row
// keeps its fencing token for the next holder; Spring's statements treat it
// as any expired row. The statements below are completed with the
// dialect's past (releaseSQL, expireMineSQL) or now (the rest).
const (
	releaseSQL = `UPDATE %sLOCK SET EXPIRED_AFTER = PAST WHERE REGION = :region AND LOCK_KEY = :lock_key AND CLIENT_ID = :client_id`
	// expireMineSQL and selectMineSQL serve Close.
	expireMineSQL = `UPDATE %sLOCK SET EXPIRED_AFTER = PAST WHERE REGION = :region AND CLIENT_ID = :client_id AND EXPIRED_AFTER >= NOW`
	selectMineSQL = `SELECT LOCK_KEY FROM %sLOCK WHERE REGION = :region AND CLIENT_ID = :client_id AND EXPIRED_AFTER >= NOW`
	// checkSQL reads no rows but fails unless the table, all of Spring 7's
	// columns and FENCE exist.
	checkSQL = `SELECT LOCK_KEY, REGION, CLIENT_ID, CREATED_DATE, EXPIRED_AFTER, FENCE FROM %sLOCK WHERE 1 = 0`
)

// query is a compiled query: positional SQL for the dialect and the names of
// its parameters in order.
type query struct {
	sql   string
	names []string
}

// params are the values a query's named parameters take.
type params struct {
	lockKey, region, clientID, channel string
	ttl, wait                          int64
	retention, batch                   int64 // the clean-up's
}

func (q query) args(p params) []any {
	args := make([]any, len(q.names))
	for i, n := range q.names {
		switch n {
		case paramLockKey:
			args[i] = p.lockKey
		case paramRegion:
			args[i] = p.region
		case paramClientID:
			args[i] = p.clientID
		case paramTTL:
			args[i] = p.ttl
		case paramWait:
			args[i] = p.wait
		case paramChannel:
			args[i] = p.channel
		case paramRetention:
			args[i] = p.retention
		case paramBatch:
			args[i] = p.batch
		}
	}
	return args
}

// bindType is the placeholder style of the dialect. It is chosen here rather
// than by sqlx from the driver name, which sqlx does not know for "pgx/v5".
func bindType(d Dialect) int {
	if d == Postgres {
		return sqlx.DOLLAR
	}
	return sqlx.QUESTION
}

// complete puts the dialect's times into a default statement.
func (d dialectSQL) complete(q string) string {
	return strings.NewReplacer("PAST", d.past, "NOW", d.now, "AGO", d.ago, "CLOCK", d.clock).Replace(q)
}

// compile replaces every %s in named with prefix and turns the sqlx named
// parameters into positional ones. It fails on unknown parameter names;
// internal statements may name more.
func compile(named, prefix string, d Dialect, internal ...string) (query, error) {
	s := strings.ReplaceAll(named, "%s", prefix)
	known := map[string]any{
		paramLockKey:  paramLockKey,
		paramRegion:   paramRegion,
		paramClientID: paramClientID,
		paramTTL:      paramTTL,
		paramWait:     paramWait,
		paramChannel:  paramChannel,
	}
	for _, n := range internal {
		known[n] = n
	}
	positional, names, err := sqlx.BindNamed(bindType(d), s, known)
	if err != nil {
		return query{}, fmt.Errorf("parameters must be among :lock_key, :region, :client_id, :ttl, :wait, :channel (write a literal colon as ::): %w", err)
	}
	q := query{sql: positional, names: make([]string, len(names))}
	for i, n := range names {
		q.names[i] = n.(string)
	}
	return q, nil
}

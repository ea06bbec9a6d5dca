package dialect

import (
	"context"
	"hash/fnv"
	"regexp"
	"strings"
)

// pgNow is PostgreSQL's current UTC wall time, as TIMESTAMP (without time
// zone) columns hold it.
const pgNow = `timezone('UTC', now())`

// Postgres is PostgreSQL 9.5 or later (ON CONFLICT), with the pgx (stdlib)
// or lib/pq driver.
var Postgres = register(&Dialect{
	Name:    "postgres",
	System:  "postgresql",
	dollar:  true,
	drivers: []string{"github.com/jackc/pgx/v5/stdlib", "github.com/jackc/pgx/v4/stdlib", "github.com/lib/pq"},

	now:   pgNow,
	past:  pgNow + ` - INTERVAL '1 microsecond'`,
	clock: `CAST(EXTRACT(EPOCH FROM now()) * 1000000 AS BIGINT)`,
	plus:  [2]string{pgNow + ` + CAST(`, ` AS BIGINT) * INTERVAL '1 microsecond'`},
	minus: [2]string{pgNow + ` - CAST(`, ` AS BIGINT) * INTERVAL '1 microsecond'`},

	Lock: LockSQL{
		// ON CONFLICT waits for a racing insert of the same key to commit
		// and then evaluates the WHERE against the committed row, so
		// contention yields 0 rows instead of a duplicate-key error; it
		// also waits for a release in flight, where an UPDATE would judge
		// the row by the version before it. A lease that is this client's
		// (taken before, or handed over by a release) it extends; an
		// expired one it takes only when no live waiter is ahead in the
		// queue.
		Acquire:  pgAcquire,
		TokenRow: true,
		Take:     pgTakeRow,
		// The keys' rows are looked up and locked one by one (LATERAL, by
		// primary key whatever the statistics), and updated by their
		// tuple ids, which the locks pin.
		TakeBatch: `WITH v AS (SELECT r.n, r.k, r.ttl, r.name FROM json_to_recordset(CAST(:rows AS JSON)) AS r(n INT, k CHAR(36), ttl BIGINT, name TEXT)), ` +
			`t AS (SELECT x.tid, v.n, v.ttl, v.name FROM v CROSS JOIN LATERAL (SELECT l.ctid AS tid FROM {prefix}LOCK l ` +
			`WHERE l.LOCK_KEY = v.k AND l.REGION = :region AND ` + pgTakeable + ` FOR UPDATE SKIP LOCKED) x) ` +
			`UPDATE {prefix}LOCK l SET CLIENT_ID = :client_id, EXPIRED_AFTER = {now} + t.ttl * INTERVAL '1 microsecond', ` +
			`FENCE = GREATEST(l.FENCE + 1, {clock}), HOLDER = :holder, LOCK_NAME = COALESCE(l.LOCK_NAME, t.name) ` +
			`FROM t WHERE l.ctid = t.tid AND l.ctid = ANY (ARRAY(SELECT tid FROM t)) RETURNING t.n, l.FENCE`,
		ExpireBatch: `WITH v AS (SELECT r.n, r.k FROM json_to_recordset(CAST(:rows AS JSON)) AS r(n INT, k CHAR(36))), ` +
			`t AS (SELECT x.tid, v.n FROM v CROSS JOIN LATERAL (SELECT l.ctid AS tid FROM {prefix}LOCK l ` +
			`WHERE l.LOCK_KEY = v.k AND l.REGION = :region AND ` + pgExpirable + ` FOR UPDATE SKIP LOCKED) x) ` +
			`UPDATE {prefix}LOCK l SET EXPIRED_AFTER = {past} ` +
			`FROM t WHERE l.ctid = t.tid AND l.ctid = ANY (ARRAY(SELECT tid FROM t)) RETURNING t.n`,
		Renew: `UPDATE {prefix}LOCK SET EXPIRED_AFTER = {now+:ttl} ` +
			`WHERE REGION = :region AND LOCK_KEY = :lock_key AND CLIENT_ID = :client_id AND EXPIRED_AFTER >= {now}`,
		ReleaseAfter: `UPDATE {prefix}LOCK SET CLIENT_ID = NULL, EXPIRED_AFTER = GREATEST({now}, LEAST(` +
			`TIMESTAMP '1970-01-01 00:00:00' + CAST(FENCE + :ttl AS BIGINT) * INTERVAL '1 microsecond', {now+:ttl})) ` +
			`WHERE REGION = :region AND LOCK_KEY = :lock_key AND CLIENT_ID = :client_id`,
		// SKIP LOCKED passes over rows an acquisition is writing; the
		// locked rows' conditions are checked again on their latest version.
		// A row with a live has-waiters flag stays: re-inserted, it would
		// start without the flag while its waiters are still queued.
		Sweep: `DELETE FROM {prefix}LOCK WHERE (LOCK_KEY, REGION) IN (SELECT LOCK_KEY, REGION FROM {prefix}LOCK ` +
			`WHERE ` + DeadLock + ` AND (QUEUED_UNTIL IS NULL OR QUEUED_UNTIL < {now}) LIMIT :batch FOR UPDATE SKIP LOCKED)`,
		Queue: &QueueSQL{
			// The waiter writes the lock row whenever it does not take
			// the lease, raising QUEUED_UNTIL to its place's deadline: so
			// it serializes with a release on the row lock, and a release
			// either sees the flag (and hands the lease over or wakes the
			// waiter) or runs before, and the waiter takes the expired
			// lease itself. taken says which. A place only orders the
			// waiters, so a statement that queues commits without waiting
			// for the log flush (synchronous_commit off for its own
			// transaction): a crash can lose only the latest places, whose
			// waiters ask again when their listener reconnects, and a
			// release that read a place flushes it with its own commit,
			// which the log orders after it. One that takes the lease
			// commits as the server is configured.
			AcquireOrWait: `WITH a AS (` + pgAcquireOrQueue + `), ` +
				`d AS (DELETE FROM {prefix}LOCK_WAIT WHERE LOCK_KEY = :lock_key AND REGION = :region AND CLIENT_ID = :client_id ` +
				`AND EXISTS (SELECT 1 FROM a WHERE a.taken)), ` +
				`w AS (INSERT INTO {prefix}LOCK_WAIT (LOCK_KEY, REGION, CLIENT_ID, WAITING_SINCE, WAITING_UNTIL, LEASE_MICROS, HOLDER) ` +
				`SELECT :lock_key, :region, :client_id, {now}, {now+:wait}, :ttl, :holder ` +
				`WHERE NOT EXISTS (SELECT 1 FROM a WHERE a.taken) ` +
				`ON CONFLICT (LOCK_KEY, REGION, CLIENT_ID) DO UPDATE SET WAITING_UNTIL = EXCLUDED.WAITING_UNTIL, ` +
				`LEASE_MICROS = EXCLUDED.LEASE_MICROS, ` +
				`WAITING_SINCE = CASE WHEN {prefix}LOCK_WAIT.WAITING_UNTIL < EXCLUDED.WAITING_SINCE ` +
				`THEN EXCLUDED.WAITING_SINCE ELSE {prefix}LOCK_WAIT.WAITING_SINCE END) ` +
				`SELECT FENCE, CASE WHEN a.taken THEN 1 ELSE 0 END FROM a WHERE CASE WHEN a.taken THEN true ` +
				`ELSE set_config('synchronous_commit', 'off', true) IS NOT NULL END`,
			// The key's live places are read once (q, materialized as it
			// is read twice). The first live waiter (nx), if any, gets the lease for the
			// length it asked for, with a new token, leaves the queue and
			// hears of it by NOTIFY ("LOCK_KEY CLIENT_ID", the token and
			// the lease's microseconds: see QueueSQL), and its HOLDER
			// becomes the row's; otherwise the row expires in place.
			// QUEUED_UNTIL becomes the last deadline of the waiters that
			// remain (rest), NULL without any; but a waiter that queued
			// after this statement's snapshot (it changed the flag since:
			// was) is not in nx or rest, so the flag it raised stays, and
			// when nobody was served all waiters of the key are woken
			// ("LOCK_KEY") to ask again.
			Release: `WITH q AS (SELECT w.CLIENT_ID, w.LEASE_MICROS, w.HOLDER, w.WAITING_SINCE, w.WAITING_UNTIL ` +
				`FROM {prefix}LOCK_WAIT w WHERE w.LOCK_KEY = :lock_key AND w.REGION = :region AND w.WAITING_UNTIL >= {now}), ` +
				`nx AS (SELECT q.CLIENT_ID, q.LEASE_MICROS, q.HOLDER FROM q WHERE q.CLIENT_ID <> :client_id ` +
				`AND q.LEASE_MICROS > 0 ORDER BY q.WAITING_SINCE, q.CLIENT_ID LIMIT 1), ` +
				`rest AS (SELECT max(q.WAITING_UNTIL) AS u FROM q WHERE q.CLIENT_ID IS DISTINCT FROM (SELECT CLIENT_ID FROM nx)), ` +
				`was AS (SELECT QUEUED_UNTIL AS q FROM {prefix}LOCK WHERE REGION = :region AND LOCK_KEY = :lock_key), ` +
				`r AS (UPDATE {prefix}LOCK l SET CLIENT_ID = COALESCE((SELECT CLIENT_ID FROM nx), l.CLIENT_ID), ` +
				`EXPIRED_AFTER = COALESCE(timezone('UTC', clock_timestamp()) + (SELECT LEASE_MICROS FROM nx) * INTERVAL '1 microsecond', {past}), ` +
				`FENCE = CASE WHEN EXISTS (SELECT 1 FROM nx) ` +
				`THEN GREATEST(l.FENCE + 1, {clock}) ELSE l.FENCE END, ` +
				`HOLDER = CASE WHEN EXISTS (SELECT 1 FROM nx) THEN (SELECT HOLDER FROM nx) ELSE l.HOLDER END, ` +
				`QUEUED_UNTIL = CASE WHEN l.QUEUED_UNTIL IS DISTINCT FROM (SELECT q FROM was) ` +
				`THEN l.QUEUED_UNTIL ELSE (SELECT u FROM rest) END ` +
				`WHERE l.REGION = :region AND l.LOCK_KEY = :lock_key AND l.CLIENT_ID = :client_id ` +
				`RETURNING l.LOCK_KEY, l.QUEUED_UNTIL, l.FENCE), ` +
				`d AS (DELETE FROM {prefix}LOCK_WAIT w WHERE w.LOCK_KEY = :lock_key AND w.REGION = :region ` +
				`AND w.CLIENT_ID = (SELECT CLIENT_ID FROM nx) AND EXISTS (SELECT 1 FROM r)) ` +
				`SELECT count(*) FROM r LEFT JOIN LATERAL (SELECT pg_notify(CAST(:channel AS TEXT), ` +
				`CAST(r.LOCK_KEY AS TEXT) || COALESCE(' ' || CAST((SELECT CLIENT_ID FROM nx) AS TEXT) || chr(31) || ` +
				`CAST(r.FENCE AS TEXT) || chr(31) || CAST((SELECT LEASE_MICROS FROM nx) AS TEXT), '')) ` +
				`WHERE EXISTS (SELECT 1 FROM nx) OR r.QUEUED_UNTIL >= {now}) n ON true`,
			// Expire is Release when nobody waits: it expires the row in
			// place, as Release does when it finds no waiter, and touches
			// nothing while the has-waiters flag is live, for Release to
			// hand the lease over. It reads no queue: a waiter that queues
			// meanwhile writes the row, and the flag it raises stops this
			// UPDATE (PostgreSQL checks the condition again on the row's
			// latest version).
			Expire: pgExpire,
			Handed: `SELECT FENCE, CAST(EXTRACT(EPOCH FROM (EXPIRED_AFTER - {now})) * 1000000 AS BIGINT) FROM {prefix}LOCK ` +
				`WHERE REGION = :region AND LOCK_KEY = :lock_key AND CLIENT_ID = :client_id AND EXPIRED_AFTER > {now}`,
			// Leave writes the lock row first (r, which d waits for), in
			// the order of Release and AcquireOrWait, lock row then queue
			// row, so that they cannot deadlock; writing it always also
			// waits for a release in flight, so that a lease handed to
			// this client meanwhile is seen (on the row's latest version)
			// and given back, and then the other waiters are woken.
			Leave: `WITH r AS (UPDATE {prefix}LOCK SET EXPIRED_AFTER = CASE WHEN CLIENT_ID = :client_id ` +
				`AND EXPIRED_AFTER > {now} THEN {past} ELSE EXPIRED_AFTER END ` +
				`WHERE REGION = :region AND LOCK_KEY = :lock_key ` +
				`RETURNING LOCK_KEY, CLIENT_ID = :client_id AND EXPIRED_AFTER < {now} AND QUEUED_UNTIL >= {now} AS wake), ` +
				`d AS (DELETE FROM {prefix}LOCK_WAIT WHERE LOCK_KEY = :lock_key AND REGION = :region AND CLIENT_ID = :client_id ` +
				`AND (SELECT count(*) FROM r) >= 0) ` +
				`SELECT count(pg_notify(CAST(:channel AS TEXT), CAST(r.LOCK_KEY AS TEXT))) FROM r WHERE r.wake`,
			// Nobody is served or ahead from a lapsed place, and a waiter
			// that asks again starts a new one.
			Sweep: `DELETE FROM {prefix}LOCK_WAIT WHERE (LOCK_KEY, REGION, CLIENT_ID) IN (` +
				`SELECT LOCK_KEY, REGION, CLIENT_ID FROM {prefix}LOCK_WAIT WHERE REGION = :region AND WAITING_UNTIL < {now} ` +
				`LIMIT :batch FOR UPDATE SKIP LOCKED)`,
			FlagColumn: "QUEUED_UNTIL",
			FlagScript: "000005_lock_queued.up.sql",
		},
	},

	Group: GroupSQL{
		Upsert:        upsertGroupReturning,
		InsertMessage: insertMessageUnlessThere,
		AddMessage:    [2]string{addMessage(false), addMessage(true)},
		AddProbe:      [2]string{addMessageProbed(false, true), addMessageProbed(true, true)},
		AddInPlace:    [2][2]string{{addInPlace(false, false), addInPlace(true, false)}, {addInPlace(false, true), addInPlace(true, true)}},
		AddSummary:    [2]string{addSummary(false), addSummary(true)},
		Summarize:     summarize(),
		ProbeAfter:    `SELECT ` + fitsOfParams(`CAST(:version AS BIGINT)`, `0`),
		AddBatch:      [3]string{addBatch(false, false), addBatch(true, false), addBatch(true, true)},
		LockRow:       lockRowForUpdate,
		LockGet:       lockGet,
		UpdateWith:    true,
		ClaimDue: `UPDATE {prefix}GROUP SET CLAIMED_UNTIL = {now+:lease} WHERE (GROUP_KEY, REGION) IN (` +
			`SELECT GROUP_KEY, REGION FROM {prefix}GROUP WHERE REGION = :region AND ` + DueGroup +
			` ORDER BY DUE_AT LIMIT :limit FOR UPDATE SKIP LOCKED) RETURNING CORRELATION_KEY, GROUP_KEY, VERSION, DUE_AT`,
		// SKIP LOCKED passes over rows another transaction is writing; the
		// locked rows' conditions are checked again on their latest version.
		SweepMessages: `DELETE FROM {prefix}GROUP_MESSAGE WHERE (GROUP_KEY, REGION, MESSAGE_KEY) IN (` +
			`SELECT m.GROUP_KEY, m.REGION, m.MESSAGE_KEY FROM {prefix}GROUP_MESSAGE m JOIN {prefix}GROUP g ` +
			`ON g.GROUP_KEY = m.GROUP_KEY AND g.REGION = m.REGION WHERE ` + finished("g") + ` LIMIT :batch FOR UPDATE SKIP LOCKED)`,
		SweepGroups: `DELETE FROM {prefix}GROUP WHERE (GROUP_KEY, REGION) IN (SELECT g.GROUP_KEY, g.REGION FROM {prefix}GROUP g ` +
			`WHERE ` + finished("g") + ` AND NOT EXISTS (SELECT 1 FROM {prefix}GROUP_MESSAGE m ` +
			`WHERE m.GROUP_KEY = g.GROUP_KEY AND m.REGION = g.REGION) LIMIT :batch FOR UPDATE SKIP LOCKED)`,
	},

	// The calls take turns under a transaction-level advisory lock, and
	// the statements run in that transaction.
	skipScript: pgExists,
	turn: func(ctx, end context.Context, q Querier, key string, f func() error) (bool, error) {
		h := fnv.New64a()
		h.Write([]byte(key))
		if _, err := q.ExecContext(ctx, `BEGIN`); err != nil {
			return true, err
		}
		return commitOrRollback(ctx, end, q, func() error {
			if _, err := q.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(h.Sum64())); err != nil {
				return err
			}
			return f()
		})
	},
	spring6Migration: func(t string) []string {
		return []string{
			`ALTER TABLE ` + t + ` ADD EXPIRED_AFTER TIMESTAMP NOT NULL DEFAULT '1970-01-01 00:00:00'`,
			`ALTER TABLE ` + t + ` ALTER COLUMN EXPIRED_AFTER DROP DEFAULT`,
		}
	},
})

// pgAcquire is PostgreSQL's acquire statement: a lease that is this
// client's (taken before, or handed over by a release) it extends; an
// expired one it takes only when no live waiter is ahead in the queue
// (pgAhead), which it reads only while the row's has-waiters flag
// QUEUED_UNTIL is live. pgAhead finds, within the ON CONFLICT clause, a live
// waiter of another client that began to wait before this one (or before
// now, if this one is not waiting): while there is one, the lease is not
// this client's to take.
const (
	pgInsert = `INSERT INTO {prefix}LOCK (LOCK_KEY, REGION, CLIENT_ID, CREATED_DATE, EXPIRED_AFTER, FENCE, LOCK_NAME, HOLDER) ` +
		`VALUES (:lock_key, :region, :client_id, {now}, {now+:ttl}, {clock}, :lock_name, :holder) ` +
		`ON CONFLICT (LOCK_KEY, REGION) DO UPDATE SET `
	pgTake = `({prefix}LOCK.CLIENT_ID = EXCLUDED.CLIENT_ID AND {prefix}LOCK.EXPIRED_AFTER >= EXCLUDED.CREATED_DATE) ` +
		`OR ({prefix}LOCK.EXPIRED_AFTER < EXCLUDED.CREATED_DATE AND ({prefix}LOCK.QUEUED_UNTIL IS NULL ` +
		`OR {prefix}LOCK.QUEUED_UNTIL < EXCLUDED.CREATED_DATE OR NOT EXISTS (` + pgAhead + `)))`
	pgAcquire = pgInsert + `CLIENT_ID = EXCLUDED.CLIENT_ID, EXPIRED_AFTER = EXCLUDED.EXPIRED_AFTER, ` +
		`FENCE = GREATEST({prefix}LOCK.FENCE + 1, EXCLUDED.FENCE), HOLDER = EXCLUDED.HOLDER, ` +
		`LOCK_NAME = COALESCE({prefix}LOCK.LOCK_NAME, EXCLUDED.LOCK_NAME) ` +
		`WHERE ` + pgTake + ` RETURNING FENCE`
	// pgTakeRow is LockSQL.Take: pgAcquire's update of an existing row as
	// a plain UPDATE, which skips the upsert's conflict check and row lock
	// before the update. It leaves an expired lease whose has-waiters flag
	// is live to the upsert, which reads the queue, and so carries no
	// subquery.
	pgTakeRow = `UPDATE {prefix}LOCK l SET CLIENT_ID = :client_id, EXPIRED_AFTER = {now+:ttl}, ` +
		`FENCE = GREATEST(l.FENCE + 1, {clock}), HOLDER = :holder, LOCK_NAME = COALESCE(l.LOCK_NAME, :lock_name) ` +
		`WHERE l.REGION = :region AND l.LOCK_KEY = :lock_key AND ` + pgTakeable + ` RETURNING l.FENCE`
	// pgTakeable is pgTakeRow's condition on its row l: this client's
	// unexpired lease, or an expired one without live waiters.
	pgTakeable = `((l.CLIENT_ID = :client_id AND l.EXPIRED_AFTER >= {now}) ` +
		`OR (l.EXPIRED_AFTER < {now} AND (l.QUEUED_UNTIL IS NULL OR l.QUEUED_UNTIL < {now})))`
	// pgExpirable is pgExpire's condition on its row l.
	pgExpirable = `l.CLIENT_ID = :client_id AND (l.QUEUED_UNTIL IS NULL OR l.QUEUED_UNTIL < {now})`
	// pgAcquireOrQueue is pgAcquire that, when it does not take the lease,
	// raises QUEUED_UNTIL to the deadline of the waiter's place instead of
	// leaving the row alone; taken says whether it took the lease. The
	// condition is evaluated once (OFFSET 0 keeps it from being inlined
	// into each CASE).
	pgAcquireOrQueue = pgInsert + `(CLIENT_ID, EXPIRED_AFTER, FENCE, HOLDER, LOCK_NAME, QUEUED_UNTIL) = (SELECT ` +
		`CASE WHEN t.take THEN EXCLUDED.CLIENT_ID ELSE {prefix}LOCK.CLIENT_ID END, ` +
		`CASE WHEN t.take THEN EXCLUDED.EXPIRED_AFTER ELSE {prefix}LOCK.EXPIRED_AFTER END, ` +
		`CASE WHEN t.take THEN GREATEST({prefix}LOCK.FENCE + 1, EXCLUDED.FENCE) ELSE {prefix}LOCK.FENCE END, ` +
		`CASE WHEN t.take THEN EXCLUDED.HOLDER ELSE {prefix}LOCK.HOLDER END, ` +
		`COALESCE({prefix}LOCK.LOCK_NAME, EXCLUDED.LOCK_NAME), ` +
		`CASE WHEN t.take THEN {prefix}LOCK.QUEUED_UNTIL ELSE GREATEST({prefix}LOCK.QUEUED_UNTIL, {now+:wait}) END ` +
		`FROM (SELECT ` + pgTake + ` AS take OFFSET 0) t) ` +
		`RETURNING FENCE, CLIENT_ID = :client_id AND EXPIRED_AFTER > {now} AS taken`
	pgAhead = `SELECT 1 FROM {prefix}LOCK_WAIT o WHERE o.LOCK_KEY = EXCLUDED.LOCK_KEY AND o.REGION = EXCLUDED.REGION ` +
		`AND o.CLIENT_ID <> EXCLUDED.CLIENT_ID AND o.WAITING_UNTIL >= EXCLUDED.CREATED_DATE ` +
		`AND o.WAITING_SINCE < COALESCE((SELECT m.WAITING_SINCE FROM {prefix}LOCK_WAIT m WHERE m.LOCK_KEY = EXCLUDED.LOCK_KEY ` +
		`AND m.REGION = EXCLUDED.REGION AND m.CLIENT_ID = EXCLUDED.CLIENT_ID AND m.WAITING_UNTIL >= EXCLUDED.CREATED_DATE), ` +
		`EXCLUDED.CREATED_DATE)`
	// pgExpire is QueueSQL.Expire: this client's row expires in place
	// unless the has-waiters flag is live.
	pgExpire = `UPDATE {prefix}LOCK SET EXPIRED_AFTER = {past} ` +
		`WHERE REGION = :region AND LOCK_KEY = :lock_key AND CLIENT_ID = :client_id ` +
		`AND (QUEUED_UNTIL IS NULL OR QUEUED_UNTIL < {now})`
)

// pgSchemaObject matches the statements of the scripts that create what may
// exist already: a table, an index, or a column.
var pgSchemaObject = regexp.MustCompile(`(?is)^(?:CREATE\s+TABLE\s+IF\s+NOT\s+EXISTS\s+(\w+)|` +
	`CREATE\s+INDEX\s+IF\s+NOT\s+EXISTS\s+(\w+)|ALTER\s+TABLE\s+(\w+)\s+ADD\s+COLUMN\s+IF\s+NOT\s+EXISTS\s+(\w+))\s`)

// pgExists reports whether statement creates a table, an index or a column
// that exists already, from the catalog. PostgreSQL's IF NOT EXISTS forms
// still lock the table (ADD COLUMN takes an ACCESS EXCLUSIVE lock, CREATE
// INDEX a SHARE lock) until the schema transaction ends: against a release
// statement, which locks the queue table before the lock table, that
// deadlocked a CreateSchema run beside live lock traffic. Skipping them takes
// no lock on the tables at all.
func pgExists(ctx context.Context, q Querier, statement string) (bool, error) {
	m := pgSchemaObject.FindStringSubmatch(statement)
	if m == nil {
		return false, nil
	}
	var query string
	var args []any
	switch {
	case m[1] != "":
		query, args = `SELECT to_regclass($1) IS NOT NULL`, []any{strings.ToLower(m[1])}
	case m[2] != "":
		query, args = `SELECT to_regclass($1) IS NOT NULL`, []any{strings.ToLower(m[2])}
	default:
		query = `SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass($1) AND attname = $2 AND NOT attisdropped)`
		args = []any{strings.ToLower(m[3]), strings.ToLower(m[4])}
	}
	var exists bool
	err := q.QueryRowContext(ctx, query, args...).Scan(&exists)
	return exists, err
}

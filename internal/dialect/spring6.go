package dialect

import "strings"

// Spring Integration 5.4 to 6.x keep no EXPIRED_AFTER: a row's lease
// ends ttl after its CREATED_DATE, which every acquisition and renewal sets
// to now, where ttl is the registry's, the same for every row. Their
// statements, which lockreg's must stay compatible with:
//
//	UPDATE INT_LOCK SET CLIENT_ID=?, CREATED_DATE=? WHERE REGION=? AND LOCK_KEY=? AND (CLIENT_ID=? OR CREATED_DATE<?)
//	INSERT INTO INT_LOCK (REGION, LOCK_KEY, CLIENT_ID, CREATED_DATE) VALUES (?, ?, ?, ?)
//	UPDATE INT_LOCK SET CREATED_DATE=? WHERE REGION=? AND LOCK_KEY=? AND CLIENT_ID=?   -- renew
//	DELETE FROM INT_LOCK WHERE REGION=? AND LOCK_KEY=? AND CLIENT_ID=?                -- unlock
//
// In the statements below :ttl is that table TTL, in microseconds, except
// where a statement says otherwise; :wait carries it where :ttl is taken.
// They keep lockreg's FENCE, which Spring's statements leave to its default.

// Spring6Lock returns the dialect's statements of a Spring Integration
// 5.4-6.x lock table, in the form of LockSQL: Acquire (with TokenRow as the
// dialect's Lock), Renew, ReleaseAfter (:ttl is lockAtLeastFor minus the
// table TTL, :wait the table TTL), Sweep and SweepKeys (:retention is the
// retention plus the table TTL); Queue is nil, as such tables have no
// waiter queue.
func (d *Dialect) Spring6Lock() LockSQL {
	l := LockSQL{
		Acquire:  spring6Acquire[d.Name],
		TokenRow: d.Lock.TokenRow,
		Renew: `UPDATE {prefix}LOCK SET CREATED_DATE = {now} ` +
			`WHERE REGION = :region AND LOCK_KEY = :lock_key AND CLIENT_ID = :client_id AND CREATED_DATE >= {now-:ttl}`,
		ReleaseAfter: spring6ReleaseAfter[d.Name],
		Sweep:        strings.ReplaceAll(d.Lock.Sweep, DeadLock, Spring6DeadLock),
		SweepKeys:    strings.ReplaceAll(d.Lock.SweepKeys, DeadLock, Spring6DeadLock),
	}
	return l
}

// The statements of a Spring 5.4-6.x table common to all dialects. A
// release expires the row in place, keeping its token for the next
// holder: with :wait, the table TTL plus a millisecond, it sets
// CREATED_DATE just past the expiry (Spring's unlock deletes the row
// instead; either way Spring's UPDATE takes it).
const (
	Spring6Release = `UPDATE {prefix}LOCK SET CREATED_DATE = {now-:wait} ` +
		`WHERE REGION = :region AND LOCK_KEY = :lock_key AND CLIENT_ID = :client_id`
	Spring6ExpireMine = `UPDATE {prefix}LOCK SET CREATED_DATE = {now-:wait} ` +
		`WHERE REGION = :region AND CLIENT_ID = :client_id AND CREATED_DATE >= {now-:ttl}`
	Spring6SelectMine = `SELECT LOCK_KEY FROM {prefix}LOCK WHERE REGION = :region AND CLIENT_ID = :client_id AND CREATED_DATE >= {now-:ttl}`
	// Spring6CheckLock reads no rows but fails unless the table, Spring
	// 6's columns and FENCE exist.
	Spring6CheckLock = `SELECT LOCK_KEY, REGION, CLIENT_ID, CREATED_DATE, FENCE FROM {prefix}LOCK WHERE 1 = 0`
	// Spring6DeadLock is DeadLock for a Spring 5.4-6.x table, with
	// :retention the retention plus the table TTL.
	Spring6DeadLock = `REGION = :region AND CREATED_DATE < {now-:retention} AND FENCE < {clock} - :retention`
)

// spring6Acquire are the acquire statements by dialect, as the dialects'
// Lock.Acquire with CREATED_DATE in place of EXPIRED_AFTER: the lease is
// taken when the row is this client's or its CREATED_DATE is more than the
// TTL ago, and CREATED_DATE moves to now, as Spring's UPDATE does.
var spring6Acquire = map[string]string{
	"postgres": `INSERT INTO {prefix}LOCK (LOCK_KEY, REGION, CLIENT_ID, CREATED_DATE, FENCE) ` +
		`VALUES (:lock_key, :region, :client_id, {now}, {clock}) ` +
		`ON CONFLICT (LOCK_KEY, REGION) DO UPDATE SET CLIENT_ID = EXCLUDED.CLIENT_ID, CREATED_DATE = EXCLUDED.CREATED_DATE, ` +
		`FENCE = GREATEST({prefix}LOCK.FENCE + 1, EXCLUDED.FENCE) ` +
		`WHERE {prefix}LOCK.CLIENT_ID = EXCLUDED.CLIENT_ID OR {prefix}LOCK.CREATED_DATE < {now-:ttl} ` +
		`RETURNING FENCE`,
	// As MySQL's Lock.Acquire: the assignments run left to right, so
	// CREATED_DATE moves only when the row is (now) ours, and the first
	// IF reads the CREATED_DATE from before.
	"mysql": `INSERT INTO {prefix}LOCK (LOCK_KEY, REGION, CLIENT_ID, CREATED_DATE, FENCE) ` +
		`VALUES (:lock_key, :region, :client_id, {now}, LAST_INSERT_ID({clock})) ` +
		`ON DUPLICATE KEY UPDATE ` +
		`CLIENT_ID = IF(CLIENT_ID = VALUES(CLIENT_ID) OR CREATED_DATE < {now-:ttl}, VALUES(CLIENT_ID), CLIENT_ID), ` +
		`CREATED_DATE = IF(CLIENT_ID = VALUES(CLIENT_ID), VALUES(CREATED_DATE), CREATED_DATE), ` +
		`FENCE = IF(CLIENT_ID = VALUES(CLIENT_ID), LAST_INSERT_ID(GREATEST(FENCE + 1, VALUES(FENCE))), ` +
		`IF(LAST_INSERT_ID(0) = 0, FENCE, FENCE))`,
	"sqlite": `INSERT INTO {prefix}LOCK (LOCK_KEY, REGION, CLIENT_ID, CREATED_DATE, FENCE) ` +
		`VALUES (:lock_key, :region, :client_id, {now}, {clock}) ` +
		`ON CONFLICT (LOCK_KEY, REGION) DO UPDATE SET CLIENT_ID = excluded.CLIENT_ID, CREATED_DATE = excluded.CREATED_DATE, ` +
		`FENCE = max({prefix}LOCK.FENCE + 1, excluded.FENCE) ` +
		`WHERE {prefix}LOCK.CLIENT_ID = excluded.CLIENT_ID OR {prefix}LOCK.CREATED_DATE < {now-:ttl} ` +
		`RETURNING FENCE`,
}

// spring6ReleaseAfter are the dialects' Lock.ReleaseAfter shifted by the
// table TTL: the lease ends at greatest(now, least(FENCE + atLeast, now +
// atLeast)), so CREATED_DATE is that less the TTL; :ttl is atLeast - TTL
// and :wait the TTL.
var spring6ReleaseAfter = map[string]string{
	"postgres": `UPDATE {prefix}LOCK SET CLIENT_ID = NULL, CREATED_DATE = GREATEST({now-:wait}, LEAST(` +
		`TIMESTAMP '1970-01-01 00:00:00' + CAST(FENCE + :ttl AS BIGINT) * INTERVAL '1 microsecond', {now+:ttl})) ` +
		`WHERE REGION = :region AND LOCK_KEY = :lock_key AND CLIENT_ID = :client_id`,
	"mysql": `UPDATE {prefix}LOCK SET CREATED_DATE = GREATEST({now-:wait}, LEAST(` +
		`TIMESTAMP('1970-01-01') + INTERVAL (FENCE + :ttl) MICROSECOND, {now+:ttl})), CLIENT_ID = NULL ` +
		`WHERE REGION = :region AND LOCK_KEY = :lock_key AND CLIENT_ID = :client_id`,
	// Milliseconds, rounded so that the lease does not end before FENCE +
	// atLeast (see the dialect's Lock.ReleaseAfter).
	"sqlite": `UPDATE {prefix}LOCK SET CREATED_DATE = max({now-:wait}, min(` +
		`strftime(` + sqliteFormat + `, ((FENCE + :ttl + 999) / 1000) / 1000.0, 'unixepoch'), {now+:ttl})), CLIENT_ID = NULL ` +
		`WHERE REGION = :region AND LOCK_KEY = :lock_key AND CLIENT_ID = :client_id`,
}

// Spring6Table returns Spring Integration 5.4-6.x's CREATE TABLE for the
// lock table (SQLite, which Spring has no script for, keeps times as text),
// with lockreg's FENCE, for tables lockreg creates in that layout.
func (d *Dialect) Spring6Table(table string) string {
	ts, fence := "TIMESTAMP", "BIGINT"
	switch d.Name {
	case "mysql":
		ts = "DATETIME(6)"
	case "sqlite":
		ts, fence = "TEXT", "INTEGER"
	}
	s := `CREATE TABLE IF NOT EXISTS ` + table + ` (LOCK_KEY CHAR(36) NOT NULL, REGION VARCHAR(100) NOT NULL, CLIENT_ID CHAR(36), ` +
		`CREATED_DATE ` + ts + ` NOT NULL, FENCE ` + fence + ` NOT NULL DEFAULT 0, ` +
		`CONSTRAINT ` + table + `_PK PRIMARY KEY (LOCK_KEY, REGION))`
	if d.Name == "mysql" {
		s += ` ENGINE=InnoDB`
	}
	return s
}

// Spring6Fence returns the statements that add lockreg's FENCE to a lock
// table that lacks it, as the scripts do (000002_lock_fence_queue): with a
// default, which Spring's statements leave in place.
func (d *Dialect) Spring6Fence(table string) []string {
	switch d.Name {
	case "postgres":
		return []string{`ALTER TABLE ` + table + ` ADD COLUMN IF NOT EXISTS FENCE BIGINT NOT NULL DEFAULT 0`}
	case "mysql":
		return []string{
			`SET @lockreg_ddl = (SELECT IF(COUNT(*) = 0, 'ALTER TABLE ` + table + ` ADD FENCE BIGINT NOT NULL DEFAULT 0', 'DO 0') ` +
				`FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = '` + table + `' AND COLUMN_NAME = 'FENCE')`,
			`PREPARE lockreg_ddl FROM @lockreg_ddl`, `EXECUTE lockreg_ddl`, `DEALLOCATE PREPARE lockreg_ddl`,
		}
	}
	return []string{`ALTER TABLE ` + table + ` ADD FENCE INTEGER NOT NULL DEFAULT 0`}
}

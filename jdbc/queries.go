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
)

// dialectSQL holds the default queries of one dialect, in sqlx named form,
// with %s standing for the table prefix.
type dialectSQL struct {
	acquire, renew string
	// now is the database's current UTC wall time in the table's time format.
	now string
}

var defaultSQL = map[Dialect]dialectSQL{
	Postgres: {
		// ON CONFLICT waits for a racing insert of the same key to commit and
		// then evaluates the WHERE against the committed row, so contention
		// yields 0 rows instead of a duplicate-key error.
		acquire: `INSERT INTO %sLOCK (LOCK_KEY, REGION, CLIENT_ID, CREATED_DATE, EXPIRED_AFTER) ` +
			`VALUES (:lock_key, :region, :client_id, timezone('UTC', now()), ` +
			`timezone('UTC', now()) + CAST(:ttl AS BIGINT) * INTERVAL '1 microsecond') ` +
			`ON CONFLICT (LOCK_KEY, REGION) DO UPDATE SET CLIENT_ID = EXCLUDED.CLIENT_ID, EXPIRED_AFTER = EXCLUDED.EXPIRED_AFTER ` +
			`WHERE %sLOCK.CLIENT_ID = EXCLUDED.CLIENT_ID OR %sLOCK.EXPIRED_AFTER < EXCLUDED.CREATED_DATE`,
		renew: `UPDATE %sLOCK SET EXPIRED_AFTER = timezone('UTC', now()) + CAST(:ttl AS BIGINT) * INTERVAL '1 microsecond' ` +
			`WHERE REGION = :region AND LOCK_KEY = :lock_key AND CLIENT_ID = :client_id AND EXPIRED_AFTER >= timezone('UTC', now())`,
		now: `timezone('UTC', now())`,
	},
	MySQL: {
		// MySQL evaluates the assignments left to right: the second sees the
		// CLIENT_ID the first has just set, so EXPIRED_AFTER moves only when
		// the row is (now) ours. Rows affected: 1 inserted, 2 updated, 0
		// unchanged.
		acquire: `INSERT INTO %sLOCK (LOCK_KEY, REGION, CLIENT_ID, CREATED_DATE, EXPIRED_AFTER) ` +
			`VALUES (:lock_key, :region, :client_id, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) + INTERVAL :ttl MICROSECOND) ` +
			`ON DUPLICATE KEY UPDATE ` +
			`CLIENT_ID = IF(CLIENT_ID = VALUES(CLIENT_ID) OR EXPIRED_AFTER < VALUES(CREATED_DATE), VALUES(CLIENT_ID), CLIENT_ID), ` +
			`EXPIRED_AFTER = IF(CLIENT_ID = VALUES(CLIENT_ID), VALUES(EXPIRED_AFTER), EXPIRED_AFTER)`,
		renew: `UPDATE %sLOCK SET EXPIRED_AFTER = UTC_TIMESTAMP(6) + INTERVAL :ttl MICROSECOND ` +
			`WHERE REGION = :region AND LOCK_KEY = :lock_key AND CLIENT_ID = :client_id AND EXPIRED_AFTER >= UTC_TIMESTAMP(6)`,
		now: `UTC_TIMESTAMP(6)`,
	},
	SQLite: {
		// 'now' is fixed for the duration of one statement. The colons of the
		// time format are doubled because sqlx reads ":name" as a parameter.
		acquire: `INSERT INTO %sLOCK (LOCK_KEY, REGION, CLIENT_ID, CREATED_DATE, EXPIRED_AFTER) ` +
			`VALUES (:lock_key, :region, :client_id, strftime('%Y-%m-%d %H::%M::%f', 'now'), ` +
			`strftime('%Y-%m-%d %H::%M::%f', 'now', printf('%.6f seconds', :ttl / 1000000.0))) ` +
			`ON CONFLICT (LOCK_KEY, REGION) DO UPDATE SET CLIENT_ID = excluded.CLIENT_ID, EXPIRED_AFTER = excluded.EXPIRED_AFTER ` +
			`WHERE %sLOCK.CLIENT_ID = excluded.CLIENT_ID OR %sLOCK.EXPIRED_AFTER < excluded.CREATED_DATE`,
		renew: `UPDATE %sLOCK SET EXPIRED_AFTER = strftime('%Y-%m-%d %H::%M::%f', 'now', printf('%.6f seconds', :ttl / 1000000.0)) ` +
			`WHERE REGION = :region AND LOCK_KEY = :lock_key AND CLIENT_ID = :client_id ` +
			`AND EXPIRED_AFTER >= strftime('%Y-%m-%d %H::%M::%f', 'now')`,
		now: `strftime('%Y-%m-%d %H::%M::%f', 'now')`,
	},
}

const (
	releaseSQL = `DELETE FROM %sLOCK WHERE REGION = :region AND LOCK_KEY = :lock_key AND CLIENT_ID = :client_id`
	// deleteMineSQL and selectMineSQL serve Close.
	deleteMineSQL = `DELETE FROM %sLOCK WHERE REGION = :region AND CLIENT_ID = :client_id`
	selectMineSQL = `SELECT LOCK_KEY FROM %sLOCK WHERE REGION = :region AND CLIENT_ID = :client_id`
	// deleteExpiredSQL is completed with the dialect's "now".
	deleteExpiredSQL = `DELETE FROM %sLOCK WHERE REGION = :region AND EXPIRED_AFTER < `
	// checkSQL reads no rows but fails unless the table and all of Spring 7's
	// columns exist.
	checkSQL = `SELECT LOCK_KEY, REGION, CLIENT_ID, CREATED_DATE, EXPIRED_AFTER FROM %sLOCK WHERE 1 = 0`
)

// query is a compiled query: positional SQL for the dialect and the names of
// its parameters in order.
type query struct {
	sql   string
	names []string
}

// params are the values a query's named parameters take.
type params struct {
	lockKey, region, clientID string
	ttl                       int64
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

// compile replaces every %s in named with prefix and turns the sqlx named
// parameters into positional ones. It fails on unknown parameter names.
func compile(named, prefix string, d Dialect) (query, error) {
	s := strings.ReplaceAll(named, "%s", prefix)
	known := map[string]any{
		paramLockKey:  paramLockKey,
		paramRegion:   paramRegion,
		paramClientID: paramClientID,
		paramTTL:      paramTTL,
	}
	positional, names, err := sqlx.BindNamed(bindType(d), s, known)
	if err != nil {
		return query{}, fmt.Errorf("parameters must be among :lock_key, :region, :client_id, :ttl (write a literal colon as ::): %w", err)
	}
	q := query{sql: positional, names: make([]string, len(names))}
	for i, n := range names {
		q.names[i] = n.(string)
	}
	return q, nil
}

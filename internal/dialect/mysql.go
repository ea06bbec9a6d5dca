package dialect

import (
	"context"
	"database/sql"
	"errors"
	"reflect"
)

// mysqlNow is MySQL's current UTC wall time, with microseconds.
const mysqlNow = `UTC_TIMESTAMP(6)`

// MySQL is MySQL 5.7+/8 and MariaDB 10.3+, InnoDB, with the
// go-sql-driver/mysql driver.
var MySQL = register(&Dialect{
	Name:    "mysql",
	System:  "mysql",
	drivers: []string{"github.com/go-sql-driver/mysql"},

	now:   mysqlNow,
	past:  mysqlNow + ` - INTERVAL 1 MICROSECOND`,
	clock: `TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', ` + mysqlNow + `)`,
	plus:  [2]string{mysqlNow + ` + INTERVAL `, ` MICROSECOND`},
	minus: [2]string{mysqlNow + ` - INTERVAL `, ` MICROSECOND`},

	UpdateCountsTwo: true,
	FoundRows:       mysqlFoundRows,

	Lock: LockSQL{
		// MySQL evaluates the assignments left to right: the second sees
		// the CLIENT_ID the first has just set, so EXPIRED_AFTER moves
		// only when the row is (now) ours. Rows affected: 1 inserted, 2
		// updated, 0 unchanged, but 1 unchanged with clientFoundRows=true.
		// So the outcome is read from LAST_INSERT_ID, which the server
		// returns with the result: the token when the lock was taken, and
		// 0 when it was not, which the otherwise idle IF sets, as the
		// VALUES row has set it to the clock already.
		Acquire: `INSERT INTO {prefix}LOCK (LOCK_KEY, REGION, CLIENT_ID, CREATED_DATE, EXPIRED_AFTER, FENCE, LOCK_NAME, HOLDER) ` +
			`VALUES (:lock_key, :region, :client_id, {now}, {now+:ttl}, LAST_INSERT_ID({clock}), :lock_name, :holder) ` +
			`ON DUPLICATE KEY UPDATE ` +
			`CLIENT_ID = IF(CLIENT_ID = VALUES(CLIENT_ID) OR EXPIRED_AFTER < VALUES(CREATED_DATE), VALUES(CLIENT_ID), CLIENT_ID), ` +
			`EXPIRED_AFTER = IF(CLIENT_ID = VALUES(CLIENT_ID), VALUES(EXPIRED_AFTER), EXPIRED_AFTER), ` +
			`HOLDER = IF(CLIENT_ID = VALUES(CLIENT_ID), VALUES(HOLDER), HOLDER), LOCK_NAME = COALESCE(LOCK_NAME, VALUES(LOCK_NAME)), ` +
			`FENCE = IF(CLIENT_ID = VALUES(CLIENT_ID), LAST_INSERT_ID(GREATEST(FENCE + 1, VALUES(FENCE))), ` +
			`IF(LAST_INSERT_ID(0) = 0, FENCE, FENCE))`,
		Renew: `UPDATE {prefix}LOCK SET EXPIRED_AFTER = {now+:ttl} ` +
			`WHERE REGION = :region AND LOCK_KEY = :lock_key AND CLIENT_ID = :client_id AND EXPIRED_AFTER >= {now}`,
		// EXPIRED_AFTER is assigned before CLIENT_ID: MySQL evaluates the
		// assignments left to right, and neither depends on the other.
		ReleaseAfter: `UPDATE {prefix}LOCK SET EXPIRED_AFTER = GREATEST({now}, LEAST(` +
			`TIMESTAMP('1970-01-01') + INTERVAL (FENCE + :ttl) MICROSECOND, {now+:ttl})), CLIENT_ID = NULL ` +
			`WHERE REGION = :region AND LOCK_KEY = :lock_key AND CLIENT_ID = :client_id`,
		// Without an index on EXPIRED_AFTER a DELETE ... LIMIT would scan,
		// and under REPEATABLE READ lock, every row it passes, live leases
		// included. The SELECT is a consistent read that locks nothing; the
		// DELETE then locks only the keys it names, and checks them again.
		Sweep:     `SELECT LOCK_KEY FROM {prefix}LOCK WHERE ` + DeadLock + ` LIMIT :batch`,
		SweepKeys: `DELETE FROM {prefix}LOCK WHERE ` + DeadLock + ` AND LOCK_KEY IN {list}`,
	},

	Group: GroupSQL{
		Upsert: insertGroup + `ON DUPLICATE KEY UPDATE GROUP_KEY = GROUP_KEY`,
		LockGroup: `SELECT ` + GroupColumns + ` FROM {prefix}GROUP WHERE GROUP_KEY = :group_key AND REGION = :region ` +
			`FOR UPDATE`,
		InsertMessage: insertMessage + `ON DUPLICATE KEY UPDATE MESSAGE_KEY = MESSAGE_KEY`,
		LockRow:       lockRowForUpdate,
		// Without an index that finds finished groups, a DELETE ... LIMIT
		// would lock every row it passes under REPEATABLE READ, so a
		// consistent read selects them and the DELETEs name them, checking
		// the condition again.
		SelectFinished: `SELECT g.GROUP_KEY FROM {prefix}GROUP g WHERE ` + finished("g") + ` LIMIT :batch`,
		SweepMessages: `DELETE FROM {prefix}GROUP_MESSAGE WHERE REGION = :region AND GROUP_KEY IN {list} ` +
			`AND EXISTS (SELECT 1 FROM {prefix}GROUP g WHERE g.GROUP_KEY = {prefix}GROUP_MESSAGE.GROUP_KEY AND ` +
			finished("g") + `) LIMIT :batch`,
		SweepGroups: `DELETE FROM {prefix}GROUP WHERE REGION = :region AND GROUP_KEY IN {list} AND ` + finished("{prefix}GROUP") +
			` AND NOT EXISTS (SELECT 1 FROM {prefix}GROUP_MESSAGE m WHERE m.GROUP_KEY = {prefix}GROUP.GROUP_KEY ` +
			`AND m.REGION = {prefix}GROUP.REGION)`,
	},

	// GET_LOCK is per server and per session, and survives the implicit
	// commits of DDL; the name holds the database's name.
	turn: func(ctx, end context.Context, q Querier, key string, f func() error) (bool, error) {
		const name = `CONCAT('lockreg_schema_', MD5(CONCAT(COALESCE(DATABASE(), ''), '.', ?)))`
		for {
			var got sql.NullInt64
			if err := q.QueryRowContext(ctx, `SELECT GET_LOCK(`+name+`, 5)`, key).Scan(&got); err != nil {
				return true, err
			}
			if !got.Valid {
				return false, errors.New("GET_LOCK failed")
			}
			if got.Int64 == 1 {
				break
			}
		}
		err := f()
		var released sql.NullInt64
		rerr := q.QueryRowContext(end, `SELECT RELEASE_LOCK(`+name+`)`, key).Scan(&released)
		return rerr != nil || released.Int64 != 1, err
	},
	spring6Migration: func(t string) []string {
		return []string{
			`ALTER TABLE ` + t + ` ADD EXPIRED_AFTER DATETIME(6) NOT NULL DEFAULT '1970-01-01 00:00:00'`,
			`ALTER TABLE ` + t + ` ALTER COLUMN EXPIRED_AFTER DROP DEFAULT`,
		}
	},
})

// mysqlFoundRows reports whether dc is a go-sql-driver/mysql connection
// whose configuration sets ClientFoundRows. The driver keeps it in an
// unexported field, read by reflection, so that no driver is imported.
func mysqlFoundRows(dc any) bool {
	v := reflect.ValueOf(dc)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return false
	}
	if v = v.Elem(); v.Kind() != reflect.Struct || v.Type().PkgPath() != "github.com/go-sql-driver/mysql" {
		return false
	}
	cfg := v.FieldByName("cfg") // *mysql.Config
	if cfg.Kind() != reflect.Pointer || cfg.IsNil() || cfg.Elem().Kind() != reflect.Struct {
		return false
	}
	f := cfg.Elem().FieldByName("ClientFoundRows")
	return f.Kind() == reflect.Bool && f.Bool()
}

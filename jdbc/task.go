package jdbc

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/lockreg/lockreg/registry"
)

// Scheduled-task locks (package github.com/lockreg/lockreg/tasklock) end a
// lease with ReleaseAfter, which keeps the row taken until lockAtLeastFor
// after the acquisition, measured with the database's clock.
//
// The acquisition time is read from the row's FENCE: the default acquire
// statement sets it to the database's clock at acquisition in microseconds
// since 1970, or to the previous token plus one when that is greater (two
// acquisitions within one microsecond, or a clock that stepped back). FENCE
// is therefore never earlier than the acquisition; when it is later, the
// expiry it yields is capped at lockAtLeastFor from the release. This
// couples ReleaseAfter to the default acquire statement: with a custom one
// (WithAcquireQuery), which issues token 0, ReleaseAfter reports
// errors.ErrUnsupported.
//
// The released row belongs to nobody (CLIENT_ID NULL): no client, this one
// included, takes it before it expires; Release, Renew and Close of this
// client no longer touch it; Spring Integration's statements treat it as a
// lock held by another client until EXPIRED_AFTER.
var taskReleaseSQL = map[Dialect]string{
	Postgres: `UPDATE %sLOCK SET CLIENT_ID = NULL, EXPIRED_AFTER = GREATEST(timezone('UTC', now()), LEAST(` +
		`TIMESTAMP '1970-01-01 00::00::00' + CAST(FENCE + :ttl AS BIGINT) * INTERVAL '1 microsecond', ` +
		`timezone('UTC', now()) + CAST(:ttl AS BIGINT) * INTERVAL '1 microsecond')) ` +
		`WHERE REGION = :region AND LOCK_KEY = :lock_key AND CLIENT_ID = :client_id`,
	// EXPIRED_AFTER is assigned before CLIENT_ID: MySQL evaluates the
	// assignments left to right, and neither depends on the other.
	MySQL: `UPDATE %sLOCK SET EXPIRED_AFTER = GREATEST(UTC_TIMESTAMP(6), LEAST(` +
		`TIMESTAMP('1970-01-01') + INTERVAL (FENCE + :ttl) MICROSECOND, ` +
		`UTC_TIMESTAMP(6) + INTERVAL :ttl MICROSECOND)), CLIENT_ID = NULL ` +
		`WHERE REGION = :region AND LOCK_KEY = :lock_key AND CLIENT_ID = :client_id`,
	// SQLite keeps milliseconds: FENCE + ttl is rounded up to the next one,
	// in integer arithmetic, so that the lock never ends before acquisition
	// + lockAtLeastFor and not a millisecond later (strftime rounds a
	// fractional unixepoch to the nearest millisecond, and a whole number
	// of milliseconds divided by 1000.0 stays closest to itself). The times
	// are text in one format, so max and min compare them correctly.
	SQLite: `UPDATE %sLOCK SET EXPIRED_AFTER = max(strftime('%Y-%m-%d %H::%M::%f', 'now'), min(` +
		`strftime('%Y-%m-%d %H::%M::%f', ((FENCE + :ttl + 999) / 1000) / 1000.0, 'unixepoch'), ` +
		`strftime('%Y-%m-%d %H::%M::%f', 'now', printf('%.6f seconds', :ttl / 1000000.0)))), CLIENT_ID = NULL ` +
		`WHERE REGION = :region AND LOCK_KEY = :lock_key AND CLIENT_ID = :client_id`,
}

type taskQueryKey struct {
	prefix  string
	dialect Dialect
}

// taskQueries caches compiled ReleaseAfter statements by table prefix and
// dialect; LockRepository has no field for them.
var taskQueries sync.Map // taskQueryKey -> query

func (r *LockRepository) taskReleaseQuery() (query, error) {
	k := taskQueryKey{r.cfg.prefix, r.cfg.dialect}
	if q, ok := taskQueries.Load(k); ok {
		return q.(query), nil
	}
	q, err := compile(taskReleaseSQL[r.cfg.dialect], r.cfg.prefix, r.cfg.dialect)
	if err != nil {
		return query{}, fmt.Errorf("jdbc: compiling a default query: %w", err) // a bug
	}
	taskQueries.Store(k, q)
	return q, nil
}

// ReleaseAfter gives up this client's lease on key so that it stays taken
// until atLeast after it was acquired, or ends now if that time has passed:
// it sets EXPIRED_AFTER to greatest(now, acquired + atLeast), where now and
// acquired are read from the database's clock (acquired is the row's FENCE,
// see the note on the statement), and hands the row to nobody (CLIENT_ID
// NULL), so that no client, this one included, takes it before then. It
// never sets an expiry later than atLeast from now. With atLeast 0 it is a
// release that leaves the row to nobody.
//
// Like Release it fails with an error wrapping registry.ErrLockLost when
// the row is gone or is another client's, and afterwards a Release of the
// key returns ErrLockLost too; a caller that releases through a
// [registry.Lock] ignores that. It fails with an error wrapping
// errors.ErrUnsupported when the repository uses a custom acquire query,
// whose leases carry no acquisition time, and with one wrapping
// registry.ErrInvalidTTL for a negative atLeast.
//
// It is one UPDATE statement, not prepared, on the database's clock. It
// keeps working after Close.
func (r *LockRepository) ReleaseAfter(ctx context.Context, key string, atLeast time.Duration) error {
	what := opKey("release after", key)
	if atLeast < 0 {
		return fmt.Errorf("%s: lockAtLeastFor %v: %w", what, atLeast, registry.ErrInvalidTTL)
	}
	if r.cfg.querySet[qAcquire] {
		return fmt.Errorf("%s: a custom acquire query records no acquisition time: %w", what, errors.ErrUnsupported)
	}
	lk, err := r.lockKey(key)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	q, err := r.taskReleaseQuery()
	if err != nil {
		return err
	}
	p := r.params(lk, 0)
	p.ttl = micros(atLeast)
	res, err := r.db.ExecContext(ctx, q.sql, q.args(p)...)
	return r.affected(ctx, what, res, err)
}

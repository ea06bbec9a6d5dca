package jdbc

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lockreg/lockreg/internal/dialect"
	"github.com/lockreg/lockreg/registry"
)

// Scheduled-task locks (lockreg's package tasklock) end a
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
// lock held by another client until EXPIRED_AFTER. The statement is the
// dialect's (Lock.ReleaseAfter in package dialect).

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
	q, p := r.sql.releaseAfter, r.params(lk, 0)
	p.ttl = dialect.Micros(atLeast)
	if r.cfg.layout == LayoutSpring6 { // the lease ends the table TTL after CREATED_DATE
		p.ttl -= dialect.Micros(r.cfg.spring6TTL)
	}
	res, err := r.db.ExecContext(ctx, q.SQL, p.args(q)...)
	return r.affected(ctx, what, res, err)
}

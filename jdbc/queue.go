package jdbc

import (
	"context"
	"fmt"
	"time"

	"github.com/lockreg/lockreg/internal/dialect"
	"github.com/lockreg/lockreg/registry"
)

// waitQueue holds PostgreSQL's waiter-queue statements. A waiter's place
// is a row of the prefix + "LOCK_WAIT" table: the acquire statements take
// the lease only when no live waiter of another client began to wait
// earlier, so waiters are served in arrival order and a client that
// releases and asks again at once queues behind them.
type waitQueue struct {
	acquireOrWait, handed *stmt
	leave, sweep          dialect.Query
}

// AcquireOrWait is Acquire that, on PostgreSQL with WithListener, also
// queues this client for the key when the lease is held elsewhere, or keeps
// its place in the queue, for WithQueueTTL; taking the lease leaves the
// queue. When it does not take the lease it also writes the lock row,
// raising its has-waiters flag (QUEUED_UNTIL, see "Waiting on PostgreSQL"
// in the package doc), so that a release running at the same time sees this
// waiter or runs first. It is still one statement and one round trip. Only a client that
// listens queues: a release hands the lease to the first in the queue and
// wakes it, whereas a client that only polls would leave a handed lease
// idle until its next poll. Without a listener, elsewhere, and with a
// custom acquire query, it is Acquire: the client polls, and whoever asks
// first after a release takes the lease, as in Spring Integration.
func (r *LockRepository) AcquireOrWait(ctx context.Context, key string, ttl time.Duration) (registry.Lease, bool, error) {
	if r.queue == nil || r.listeners == nil {
		return r.Acquire(ctx, key, ttl)
	}
	return r.acquireWith(ctx, "acquire", key, ttl, r.queue.acquireOrWait)
}

// HandedLease reports whether a release handed this client the lease on key:
// on PostgreSQL a release gives the lease to the first live waiter, with a
// new token, so that the waiter only has to read it, one SELECT, instead of
// writing. The lease's TTL is what remains of it. Elsewhere it reports
// false.
func (r *LockRepository) HandedLease(ctx context.Context, key string) (registry.Lease, bool, error) {
	if r.queue == nil {
		return registry.Lease{}, false, nil
	}
	what := opKey("claim", key)
	lk, hk, h, _, err := r.startAcquire(what, key)
	if err != nil {
		return registry.Lease{}, false, err
	}
	var (
		lease  registry.Lease
		remain int64
	)
	ok, err := r.queue.handed.scan(ctx, r.db, r.params(lk, 0).args(r.queue.handed.q), &lease.Token, &remain)
	lease.TTL = time.Duration(remain) * time.Microsecond
	// A claim that finds nothing says nothing of a lease held before.
	r.settleHanded(hk, h, ok && err == nil, false, true)
	if err != nil {
		return registry.Lease{}, false, r.wrap(ctx, what, err)
	}
	return lease, ok, nil
}

// Leave takes this client out of key's queue and gives back a lease that a
// release handed it meanwhile, also one a release still in flight hands it
// (Leave waits for that release's row lock), waking the key's other waiters
// when it gives one back: one statement on PostgreSQL, nothing
// elsewhere. Without the tables there is neither a place nor a lease to
// give back, so Leave returns nil; the acquire statement that failed
// reports the missing table.
func (r *LockRepository) Leave(ctx context.Context, key string) error {
	if r.queue == nil {
		return nil
	}
	what := opKey("leave", key)
	lk, err := r.lockKey(key)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if _, err := r.db.ExecContext(ctx, r.queue.leave.SQL, r.params(lk, 0).args(r.queue.leave)...); err != nil {
		if r.cfg.d.IsNoTable(ctx, r.db, err) && ctx.Err() == nil {
			return nil
		}
		return r.wrap(ctx, what, err)
	}
	return nil
}

var _ registry.HandOffQueue = (*LockRepository)(nil)

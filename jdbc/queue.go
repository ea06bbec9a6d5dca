package jdbc

import (
	"context"
	"fmt"
	"sync"
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

	mu     sync.Mutex
	places map[string]place // this client's waits, by held-set key
}

// place is what this client knows of one of its waits: when its latest
// queue statement that did not take the lease was sent and the token it
// found on the row, and the latest hand-off to it that an announcement
// told of. A hand-off whose token is greater than the one found was
// written after that statement (tokens only grow), and its lease runs
// from after the statement's commit (see dialect.QueueSQL.Release), so it
// lasts at least until sent plus its microseconds.
type place struct {
	sent          time.Time
	found         int64
	token, micros int64
}

// queued records a queue statement sent at sent that found token found
// and did not take the lease; a token of 0 (none found) records nothing.
func (q *waitQueue) queued(hk string, sent time.Time, found int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if found <= 0 {
		delete(q.places, hk)
		return
	}
	p := q.places[hk]
	p.sent, p.found = sent, found
	if q.places == nil {
		q.places = make(map[string]place)
	}
	q.places[hk] = p
}

// announced records an announcement that a release handed the lease on
// hk to this client with token and a lease of micros; the listener calls
// it before it wakes the waiter.
func (q *waitQueue) announced(hk string, token, micros int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if p, ok := q.places[hk]; ok && token > p.token {
		p.token, p.micros = token, micros
		q.places[hk] = p
	}
}

// handedByAnnouncement returns the lease that an announcement handed to
// this client's wait on hk, if one did after its latest queue statement
// and at least half of the lease is left by this client's clock (else the
// row's SELECT tells the longer time the lease really has), and ends the
// wait.
func (q *waitQueue) handedByAnnouncement(hk string) (registry.Lease, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	p, ok := q.places[hk]
	if !ok || p.token <= p.found {
		return registry.Lease{}, false
	}
	lease := time.Duration(p.micros) * time.Microsecond
	left := time.Until(p.sent.Add(lease))
	if left < lease/2 {
		return registry.Lease{}, false
	}
	delete(q.places, hk)
	return registry.Lease{Token: p.token, TTL: left}, true
}

// forget ends the record of this client's wait on hk.
func (q *waitQueue) forget(hk string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.places, hk)
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
// new token, and its announcement carries the token and the lease's
// length, so that the waiter, woken by it, takes the lease with no
// statement at all, or reads it, one SELECT, when the announcement was
// not heard or its token may be stale (not greater than the token the
// waiter's latest queue statement found), or when the wait took more than
// half of the lease. The lease's TTL is what remains of it, by the
// waiter's clock counted from its latest queue statement (the release
// began its lease after that statement) or by the row's SELECT. Elsewhere
// it reports false.
func (r *LockRepository) HandedLease(ctx context.Context, key string) (registry.Lease, bool, error) {
	if r.queue == nil {
		return registry.Lease{}, false, nil
	}
	what := opKey("claim", key)
	lk, hk, h, _, err := r.startAcquire(what, key)
	if err != nil {
		return registry.Lease{}, false, err
	}
	if lease, ok := r.queue.handedByAnnouncement(hk); ok {
		r.settleHanded(hk, h, true, false, true)
		return lease, true, nil
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
	if ok {
		r.queue.forget(hk)
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
	r.queue.forget(heldKey(lk))
	if _, err := r.db.ExecContext(ctx, r.queue.leave.SQL, r.params(lk, 0).args(r.queue.leave)...); err != nil {
		if r.cfg.d.IsNoTable(ctx, r.db, err) && ctx.Err() == nil {
			return nil
		}
		return r.wrap(ctx, what, err)
	}
	return nil
}

var _ registry.HandOffQueue = (*LockRepository)(nil)

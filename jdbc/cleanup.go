package jdbc

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockreg/lockreg/internal/dialect"
	"github.com/lockreg/lockreg/registry"
)

// Defaults of the clean-up. A lock row needs no retention for itself; it is
// kept an hour after it expired so that a database clock stepping back by
// up to an hour cannot issue a token below one already issued. A completed
// group is kept a week, Kafka's default log retention: as long as a broker
// typically keeps a message it could redeliver.
const (
	defaultLockRetention        = time.Hour
	defaultLockCleanupInterval  = 5 * time.Minute
	defaultGroupRetention       = 7 * 24 * time.Hour
	defaultGroupCleanupInterval = time.Hour

	// cleanupBatch bounds the rows one clean-up statement deletes, so that a
	// first clean-up of millions of rows holds its row locks (or SQLite's
	// write lock) only briefly at a time.
	cleanupBatch = 1000
	// maxCleanupPause bounds the pause between batches.
	maxCleanupPause = time.Second
)

// cleanupSpec is a clean-up option as given.
type cleanupSpec struct {
	retention, interval time.Duration
	set, off            bool
}

// Indexes of options.cleanup.
const (
	cleanLocks = iota
	cleanGroups
)

// WithCleanup sets the background clean-up of a LockRepository: every
// interval, one repository of the table and region deletes the rows whose
// lease expired more than retention ago (by the database's clock) and, on
// PostgreSQL, the lapsed places of the waiter queue. The default is
// retention 1 h, interval 5 min. Both must be positive.
//
// It never deletes a live lease, and keeps tokens increasing: a row is
// deleted only once its token is also more than retention behind the
// database's clock, from which the next acquisition of the key takes its
// token. So tokens increase across the clean-up unless the database's clock
// steps back by more than the retention. A shorter retention narrows that
// margin; a longer one keeps more rows: the table holds a row for each key
// locked within the retention (an expired row is reused by the next
// acquisition of its key).
//
// The work is coordinated through the lock table itself: a pass begins by
// taking the lease on the LOCK_KEY UUIDKey("lockreg cleanup " + prefix +
// "LOCK") in the region for the interval plus 2 s (room for a batch and a
// pause, after which it renews it), and keeps it when done, so that the
// other repositories skip their passes until it lapses (Close gives it
// back). A pass that outlives its lease stops, and the repository that
// takes the lease over goes on. A pass costs that acquisition and one
// DELETE per 1000 rows (on MySQL a SELECT of the keys and a DELETE of them,
// which locks only the rows it deletes), with a pause as long as the batch
// took between batches; without an index on EXPIRED_AFTER each statement
// scans the region's rows. The first pass runs one interval after the
// repository's first acquisition, so a process that lives shorter than the
// interval does not clean; DeleteExpired cleans on demand. Close, and the
// Close of a registry made on the repository, stop it. Failures go to the
// WithErrorHandler function, and the pass is tried again an interval later.
//
// NewGroupStore ignores it; see WithGroupCleanup.
func WithCleanup(retention, interval time.Duration) Option {
	return func(o *options) {
		o.cleanup[cleanLocks] = cleanupSpec{retention: retention, interval: interval, set: true}
	}
}

// WithGroupCleanup sets the background clean-up of a GroupStore (and of an
// Outbox on it): every interval, one store of the tables and region deletes
// the groups that are finished, with the rows that remember their messages'
// UUIDs. A group is finished when it is complete, holds no unreleased
// message, has no due time (no pending timeout, no scheduled removal) and
// has not changed for retention, by the database's clock; open groups and
// groups with a due time are never deleted, however old. The default is
// retention 7 days, interval 1 h. Both must be positive.
//
// Retention is the window in which a redelivered message of a completed
// group is still recognised (groupstore.Duplicate) and a late one rejected
// (groupstore.Rejected): after it, the message starts a new group with the
// same key, so an aggregator would release it again. Set it longer than the
// longest time after which your broker may redeliver a message (its
// retention, ack deadlines, the longest outage you plan for); the cost is
// the kept groups, a row per group and one per message, without payloads.
//
// A pass is coordinated as WithCleanup's is, through the lease on the LOCK_KEY
// UUIDKey("lockreg cleanup " + prefix + "GROUP") in the lock table (which
// CreateSchema creates with the group tables), in the store's region. It
// deletes at most 1000 rows per statement: the message rows of finished
// groups first, then the finished groups without message rows. Each
// statement finds finished groups by scanning the region's groups without
// a due time. The first pass runs one interval after the store's first Add;
// Close stops it. Failures go to the WithErrorHandler function. A group
// whose message rows a pass has begun to delete may reject a redelivery as
// late before the group itself is deleted.
//
// NewLockRepository ignores it; see WithCleanup.
func WithGroupCleanup(retention, interval time.Duration) Option {
	return func(o *options) {
		o.cleanup[cleanGroups] = cleanupSpec{retention: retention, interval: interval, set: true}
	}
}

// WithoutCleanup turns off the background clean-up of a LockRepository and
// of a GroupStore: they start no goroutine, and their tables keep every row
// until deleted otherwise (LockRepository.DeleteExpired,
// GroupStore.DeleteCompleted, or SQL). A later WithCleanup or
// WithGroupCleanup turns that clean-up on again.
func WithoutCleanup() Option {
	return func(o *options) { o.cleanup[cleanLocks].off, o.cleanup[cleanGroups].off = true, true }
}

// settleCleanup checks the clean-up options and applies their defaults.
func (c *config) settleCleanup() error {
	names := [2]string{"WithCleanup", "WithGroupCleanup"}
	defaults := [2]cleanupSpec{
		{retention: defaultLockRetention, interval: defaultLockCleanupInterval},
		{retention: defaultGroupRetention, interval: defaultGroupCleanupInterval},
	}
	for i := range c.cleanup {
		s := &c.cleanup[i]
		if !s.set {
			s.retention, s.interval = defaults[i].retention, defaults[i].interval
			continue
		}
		if s.retention <= 0 || s.interval <= 0 {
			return fmt.Errorf("%w: %s(%v, %v): the retention and the interval must be positive",
				ErrInvalidOption, names[i], s.retention, s.interval)
		}
	}
	return nil
}

// errLeaseLost ends a pass whose lease another client took over.
var errLeaseLost = errors.New("clean-up lease lost")

// cleaner runs clean-up passes in the background, from start until stop:
// one every interval, each under a lease on leaseKey that keeps the other
// instances of the table and region from cleaning for the interval.
type cleaner struct {
	interval time.Duration
	lease    *LockRepository // the default statements, executed unprepared
	leaseKey string          // a LOCK_KEY
	// sweep deletes dead rows in batches, calling between after each full
	// batch with the time it took; wrap describes its errors.
	sweep   func(ctx context.Context, between func(context.Context, time.Duration) error) error
	wrap    func(ctx context.Context, err error) error
	onError func(error)

	started atomic.Bool
	mu      sync.Mutex
	stopped bool
	cancel  context.CancelFunc
	done    chan struct{} // closed when the goroutine ends
}

// newCleaner returns the cleaner that spec (the clean-up options at index
// which) asks for, or nil if it is off. It does no I/O.
func newCleaner(db DB, cfg *config, which int, leaseName string,
	sweep func(context.Context, func(context.Context, time.Duration) error) error,
	wrap func(context.Context, error) error) *cleaner {
	spec := cfg.cleanup[which]
	if spec.off {
		return nil
	}
	return &cleaner{interval: spec.interval, lease: leaseRepository(db, cfg), leaseKey: UUIDKey(leaseName), sweep: sweep,
		wrap: wrap, onError: cfg.onError}
}

// leaseRepository returns a repository of db's lock table with the default
// acquire and renew statements, for the clean-up's lease: not the custom
// queries, not the queue. Its statements are never prepared: a lease once
// an interval is not worth a prepared statement on each connection.
func leaseRepository(db DB, cfg *config) *LockRepository {
	c := *cfg
	c.querySet = [3]bool{}
	statements, _ := compileLock(&c) // without custom queries it cannot fail
	return newRepository(db, &c, statements, true)
}

// newLockCleaner returns the clean-up of r's table and region, or nil.
func newLockCleaner(r *LockRepository) *cleaner {
	retention := r.cfg.cleanup[cleanLocks].retention
	return newCleaner(r.db, r.cfg, cleanLocks, "lockreg cleanup "+r.cfg.table,
		func(ctx context.Context, between func(context.Context, time.Duration) error) error {
			_, err := r.deleteDead(ctx, retention, between)
			return err
		},
		func(ctx context.Context, err error) error { return r.wrap(ctx, "jdbc: clean-up of "+r.cfg.table, err) })
}

// start starts the goroutine unless it runs or stop was called. It is cheap
// once started. A nil cleaner does nothing.
func (c *cleaner) start() {
	if c == nil || c.started.Load() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped || c.started.Load() {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel, c.done = cancel, make(chan struct{})
	c.started.Store(true)
	go c.loop(ctx)
}

// stop ends the goroutine, cancelling a pass in flight, and waits for it
// until ctx is done; start does nothing afterwards.
func (c *cleaner) stop(ctx context.Context) error {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	c.stopped = true
	cancel, done := c.cancel, c.done
	c.mu.Unlock()
	if cancel == nil {
		return nil
	}
	cancel()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *cleaner) loop(ctx context.Context) {
	defer close(c.done)
	t := time.NewTimer(c.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := c.pass(ctx); err != nil && ctx.Err() == nil {
			c.onError(err)
		}
		t.Reset(c.interval)
	}
}

// pass takes the lease and, if it won it, sweeps.
func (c *cleaner) pass(ctx context.Context) error {
	_, won, err := c.lease.doAcquire(ctx, c.lease.acquire, c.leaseKey, c.leaseTTL())
	if err != nil {
		return c.lease.wrap(ctx, "jdbc: taking the clean-up lease", err) // names the lock table
	}
	if !won {
		return nil
	}
	if err := c.sweep(ctx, c.between); err != nil && !errors.Is(err, errLeaseLost) {
		return c.wrap(ctx, err)
	}
	return nil
}

// leaseTTL is the length of the lease: the interval, so that the other
// instances skip until this one's next pass, and room for a batch and a
// pause, so that a pass keeps it from one renewal to the next while its
// batches take less than the pause's bound. A pass that outlives its lease
// ends at its next renewal, and the instance that takes the lease over
// goes on.
func (c *cleaner) leaseTTL() time.Duration { return c.interval + 2*maxCleanupPause }

// between pauses as long as the last batch took, at most maxCleanupPause,
// so that the clean-up leaves the tables to others at least half of the
// time, and then renews the lease for another interval.
func (c *cleaner) between(ctx context.Context, took time.Duration) error {
	t := time.NewTimer(min(took, maxCleanupPause))
	select {
	case <-t.C:
	case <-ctx.Done():
		t.Stop()
		return ctx.Err()
	}
	l := c.lease
	res, err := l.renew.exec(ctx, l.db, l.params(c.leaseKey, c.leaseTTL()).args(l.renew.q))
	if err == nil {
		err = lost(res)
	}
	if err != nil && errors.Is(err, registry.ErrLockLost) {
		return errLeaseLost
	}
	return err
}

// drain runs step until a batch is not full, calling between (if not nil)
// after each full one, and returns the rows deleted.
func drain(ctx context.Context, step func(context.Context) (deleted int64, full bool, err error),
	between func(context.Context, time.Duration) error) (int64, error) {
	var total int64
	for {
		begin := time.Now()
		n, full, err := step(ctx)
		total += n
		if err != nil || !full {
			return total, err
		}
		if between != nil {
			if err := between(ctx, time.Since(begin)); err != nil {
				return total, err
			}
		}
	}
}

// DeleteExpired deletes the expired rows of this repository's region,
// whoever their client, and returns how many it deleted (Spring
// Integration's deleteExpired); on PostgreSQL it also deletes lapsed places
// in the waiter queue. It spares a row whose token is not yet behind the
// database's clock (after the clock stepped back), so that the next token
// of its key, taken from the clock, is greater. Nothing requires calling
// it: an expired row is taken over by the next Acquire, and the background
// clean-up (WithCleanup) deletes rows once they have been expired for its
// retention. It deletes at most 1000 rows per statement, in as many
// statements as it takes, not prepared, on the database's clock (on MySQL
// each batch is a SELECT of the keys and a DELETE of them); without an
// index on EXPIRED_AFTER each statement scans the region's rows.
func (r *LockRepository) DeleteExpired(ctx context.Context) (int64, error) {
	n, err := r.deleteDead(ctx, 0, nil)
	if err != nil {
		return n, r.wrap(ctx, "jdbc: delete expired", err)
	}
	return n, nil
}

// deleteDead deletes, in batches, the region's rows that have been dead
// (deadLock) for retention and the lapsed places in the queue, calling
// between after each full batch, and returns the lock rows it deleted.
func (r *LockRepository) deleteDead(ctx context.Context, retention time.Duration,
	between func(context.Context, time.Duration) error) (int64, error) {
	p := r.params("", 0)
	p.retention, p.batch = micros(retention), cleanupBatch
	n, err := drain(ctx, func(ctx context.Context) (int64, bool, error) { return r.sweepBatch(ctx, p) }, between)
	if err != nil || r.queue == nil {
		return n, err
	}
	_, err = drain(ctx, func(ctx context.Context) (int64, bool, error) {
		m, err := dialect.Count(r.db.ExecContext(ctx, r.queue.sweep.SQL, p.args(r.queue.sweep)...))
		return m, m == cleanupBatch, err
	}, between)
	return n, err
}

// sweepBatch deletes one batch of dead rows and reports whether it was full.
func (r *LockRepository) sweepBatch(ctx context.Context, p params) (int64, bool, error) {
	sweep, keysQ := r.sql.sweep, r.sql.sweepKeys
	if r.cfg.d.Lock.SweepKeys == "" {
		n, err := dialect.Count(r.db.ExecContext(ctx, sweep.SQL, p.args(sweep)...))
		return n, n == cleanupBatch, err
	}
	keys, err := dialect.Strings(r.db.QueryContext(ctx, sweep.SQL, p.args(sweep)...))
	if err != nil || len(keys) == 0 {
		return 0, false, err
	}
	n, err := dialect.Count(r.db.ExecContext(ctx, keysQ.WithList(len(keys)), keysQ.Args(p.value, anys(keys)...)...))
	return n, len(keys) == cleanupBatch, err
}

// anys converts strings to arguments.
func anys(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

package jdbc

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

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
	wrap func(context.Context, error) error) (*cleaner, error) {
	spec := cfg.cleanup[which]
	if spec.off {
		return nil, nil
	}
	lease, err := leaseRepository(db, cfg)
	if err != nil {
		return nil, err
	}
	return &cleaner{interval: spec.interval, lease: lease, leaseKey: UUIDKey(leaseName), sweep: sweep, wrap: wrap,
		onError: cfg.onError}, nil
}

// leaseRepository returns a repository of db's lock table with the default
// acquire and renew statements, for the clean-up's lease: not the custom
// queries, not the queue. Its statements are never prepared (closed
// statements execute unprepared): a lease once an interval is not worth a
// prepared statement on each connection.
func leaseRepository(db DB, cfg *config) (*LockRepository, error) {
	c := *cfg
	c.querySet = [3]bool{}
	d := defaultSQL[c.dialect]
	acquire, err := compile(d.acquire, c.prefix, c.dialect)
	if err != nil {
		return nil, fmt.Errorf("jdbc: compiling a default query: %w", err) // a bug
	}
	renew, err := compile(d.renew, c.prefix, c.dialect)
	if err != nil {
		return nil, fmt.Errorf("jdbc: compiling a default query: %w", err)
	}
	return &LockRepository{db: db, cfg: &c, acquire: &stmt{q: acquire, closed: true}, renew: &stmt{q: renew, closed: true},
		acquireReturns: c.dialect != MySQL}, nil
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
	res, err := l.renew.exec(ctx, l.db, l.renew.q.args(l.params(c.leaseKey, c.leaseTTL())))
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

// inList returns "(?, ?, ...)" for n values.
func inList(n int) string {
	b := make([]byte, 0, 3*n+1)
	b = append(b, '(')
	for i := range n {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = append(b, '?')
	}
	return string(append(b, ')'))
}

package jdbc

import (
	"context"
	"fmt"
	"time"

	"github.com/lockreg/lockreg/internal/cleanup"
	"github.com/lockreg/lockreg/internal/dialect"
)

// Defaults of the clean-up. A lock row needs no retention for itself; it is
// kept an hour after it expired so that a database clock stepping back by
// up to an hour cannot issue a token below one already issued.
const (
	defaultRetention       = time.Hour
	defaultCleanupInterval = 5 * time.Minute
)

// cleanupSpec is the clean-up option as given.
type cleanupSpec struct {
	retention, interval time.Duration
	set, off            bool
}

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
func WithCleanup(retention, interval time.Duration) Option {
	return func(o *options) { o.cleanup = cleanupSpec{retention: retention, interval: interval, set: true} }
}

// WithoutCleanup turns off the background clean-up of a LockRepository: it
// starts no goroutine, and the table keeps every row until deleted
// otherwise (DeleteExpired, or SQL). A later WithCleanup turns it on again.
func WithoutCleanup() Option { return func(o *options) { o.cleanup.off = true } }

// settleCleanup checks the clean-up option and applies its defaults.
func (c *config) settleCleanup() error {
	s := &c.cleanup
	if !s.set {
		s.retention, s.interval = defaultRetention, defaultCleanupInterval
		return nil
	}
	if s.retention <= 0 || s.interval <= 0 {
		return fmt.Errorf("%w: WithCleanup(%v, %v): the retention and the interval must be positive",
			ErrInvalidOption, s.retention, s.interval)
	}
	return nil
}

// newCleanup returns the clean-up of r's table and region, or nil if it is
// off. Its lease is a repository of the same table, region and client id
// with the default acquire and renew statements (not the custom queries,
// not the queue), never prepared: a lease once an interval is not worth a
// prepared statement on each connection. It does no I/O.
func newCleanup(r *LockRepository) *cleanup.Runner {
	spec := r.cfg.cleanup
	if spec.off {
		return nil
	}
	c := *r.cfg
	c.querySet = [3]bool{}
	c.keyMapping = func(k string) string { return k } // the lease key is a LOCK_KEY
	statements, _ := compileLock(&c)                  // without custom queries it cannot fail
	lease := newRepository(r.db, &c, statements, true)
	return cleanup.New(spec.interval, lease, UUIDKey("lockreg cleanup "+c.table), "jdbc",
		func(ctx context.Context, between cleanup.Between) error {
			if _, err := r.deleteDead(ctx, spec.retention, between); err != nil {
				return r.wrap(ctx, "jdbc: clean-up of "+c.table, err)
			}
			return nil
		}, c.reporter("cleanup"))
}

// DeleteExpired deletes the expired rows of this repository's region,
// whoever their client, and returns how many it deleted (Spring
// Integration's deleteExpired); on PostgreSQL it also deletes lapsed places
// in the waiter queue. It spares a row whose token is not yet behind the
// database's clock (after the clock stepped back), so that the next token
// of its key, taken from the clock, is greater, and on PostgreSQL a row
// whose has-waiters flag is live, whose waiters would otherwise find a new
// row without the flag. Nothing requires calling
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
func (r *LockRepository) deleteDead(ctx context.Context, retention time.Duration, between cleanup.Between) (int64, error) {
	p := r.params("", 0)
	p.retention, p.batch = dialect.Micros(retention), cleanup.Batch
	if r.cfg.layout == LayoutSpring6 { // dead the table TTL after CREATED_DATE
		p.retention += dialect.Micros(r.cfg.spring6TTL)
	}
	n, err := cleanup.Drain(ctx, func(ctx context.Context) (int64, bool, error) { return r.sweepBatch(ctx, p) }, between)
	if err != nil || r.queue == nil {
		return n, err
	}
	_, err = cleanup.Drain(ctx, func(ctx context.Context) (int64, bool, error) {
		m, err := dialect.Count(r.db.ExecContext(ctx, r.queue.sweep.SQL, p.args(r.queue.sweep)...))
		return m, m == cleanup.Batch, err
	}, between)
	return n, err
}

// sweepBatch deletes one batch of dead rows and reports whether it was full.
func (r *LockRepository) sweepBatch(ctx context.Context, p params) (int64, bool, error) {
	sweep, keysQ := r.sql.sweep, r.sql.sweepKeys
	if r.cfg.d.Lock.SweepKeys == "" {
		n, err := dialect.Count(r.db.ExecContext(ctx, sweep.SQL, p.args(sweep)...))
		return n, n == cleanup.Batch, err
	}
	keys, err := dialect.Strings(r.db.QueryContext(ctx, sweep.SQL, p.args(sweep)...))
	if err != nil || len(keys) == 0 {
		return 0, false, err
	}
	n, err := dialect.Count(r.db.ExecContext(ctx, keysQ.WithList(len(keys)), keysQ.Args(p.value, anys(keys)...)...))
	return n, len(keys) == cleanup.Batch, err
}

// anys converts strings to arguments.
func anys(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

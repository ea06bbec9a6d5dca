// Package cleanup runs the background clean-up of lockreg's SQL tables
// (package jdbc's expired lock rows, package sqlstore's finished groups):
// one pass every interval, under a lease in the lock table that keeps the
// other instances of the table and region from cleaning meanwhile, each
// pass deleting in batches with pauses between them.
package cleanup

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockreg/lockreg/registry"
)

const (
	// Batch bounds the rows one clean-up statement deletes, so that a
	// first clean-up of millions of rows holds its row locks (or SQLite's
	// write lock) only briefly at a time.
	Batch = 1000
	// maxPause bounds the pause between batches.
	maxPause = time.Second
)

// Between is called by a sweep after each full batch, with the time the
// batch took: it pauses and renews the lease, and returns an error when the
// sweep is to stop.
type Between func(ctx context.Context, took time.Duration) error

// Sweep deletes dead rows in batches, calling between after each full
// batch.
type Sweep func(ctx context.Context, between Between) error

// Lease is the part of a lock repository ([registry.Repository]) that a
// Runner takes its lease with.
type Lease interface {
	Acquire(ctx context.Context, key string, ttl time.Duration) (registry.Lease, bool, error)
	Renew(ctx context.Context, key string, ttl time.Duration) error
}

// errLeaseLost ends a pass whose lease another client took over.
var errLeaseLost = errors.New("clean-up lease lost")

// Runner runs clean-up passes in the background, from Start until Stop:
// one every interval, each under a lease on a key of a lock repository
// that keeps the other instances of the table and region from cleaning for
// the interval. A nil *Runner does nothing.
type Runner struct {
	interval time.Duration
	lease    Lease
	leaseKey string
	what     string // names the lease's owner in errors, as "jdbc"
	sweep    Sweep
	onError  func(error)

	started atomic.Bool
	mu      sync.Mutex
	stopped bool
	cancel  context.CancelFunc
	done    chan struct{} // closed when the goroutine ends
}

// New returns a runner of sweep every interval, under the lease on key in
// lease; sweep's errors, and those of taking the lease prefixed with what,
// go to onError. It does no I/O and starts nothing.
func New(interval time.Duration, lease Lease, key, what string, sweep Sweep, onError func(error)) *Runner {
	return &Runner{interval: interval, lease: lease, leaseKey: key, what: what, sweep: sweep, onError: onError}
}

// Start starts the goroutine unless it runs or Stop was called. It is cheap
// once started.
func (c *Runner) Start() {
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

// Stop ends the goroutine, cancelling a pass in flight, and waits for it
// until ctx is done; Start does nothing afterwards.
func (c *Runner) Stop(ctx context.Context) error {
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

func (c *Runner) loop(ctx context.Context) {
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
func (c *Runner) pass(ctx context.Context) error {
	_, won, err := c.lease.Acquire(ctx, c.leaseKey, c.leaseTTL())
	if err != nil {
		return fmt.Errorf("%s: taking the clean-up lease: %w", c.what, err) // names the lock table
	}
	if !won {
		return nil
	}
	if err := c.sweep(ctx, c.between); err != nil && !errors.Is(err, errLeaseLost) {
		return err
	}
	return nil
}

// leaseTTL is the length of the lease: the interval, so that the other
// instances skip until this one's next pass, and room for a batch and a
// pause, so that a pass keeps it from one renewal to the next while its
// batches take less than the pause's bound. A pass that outlives its lease
// ends at its next renewal, and the instance that takes the lease over
// goes on.
func (c *Runner) leaseTTL() time.Duration { return c.interval + 2*maxPause }

// between pauses as long as the last batch took, at most maxPause, so that
// the clean-up leaves the tables to others at least half of the time, and
// then renews the lease for another interval.
func (c *Runner) between(ctx context.Context, took time.Duration) error {
	t := time.NewTimer(min(took, maxPause))
	select {
	case <-t.C:
	case <-ctx.Done():
		t.Stop()
		return ctx.Err()
	}
	err := c.lease.Renew(ctx, c.leaseKey, c.leaseTTL())
	if errors.Is(err, registry.ErrLockLost) {
		return errLeaseLost
	}
	return err
}

// Drain runs step until a batch is not full, calling between (if not nil)
// after each full one, and returns the rows deleted.
func Drain(ctx context.Context, step func(context.Context) (deleted int64, full bool, err error), between Between) (int64, error) {
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

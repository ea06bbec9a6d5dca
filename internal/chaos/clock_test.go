//go:build chaos

package chaos

import (
	"context"
	"database/sql"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockreg/lockreg/internal/testdb"
	"github.com/lockreg/lockreg/jdbc"
	"github.com/lockreg/lockreg/registry"
)

// Leases are judged by the database's clock alone. A registry whose
// process clock is decades off (it runs in a testing/synctest bubble,
// whose clock starts at 2000-01-01 00:00 UTC, moves only when the bubble
// idles and, paced, no faster than the real one) excludes, and is excluded by, registries on the real clock
// exactly as an in-sync one: no fenced increment is lost or refused, its
// lease's expiry is the database's now plus the TTL, and a client on the
// real clock takes the key once that passes, never before.
//
// The registry has no clock option, and faketime cannot move a Go
// program's clock (Go reads the vDSO, not libc), hence the bubble.
func TestAProcessClockFarFromTheDatabasesChangesNothing(t *testing.T) {
	const ttl = 2 * time.Second
	for _, b := range allBackends(t) {
		t.Run(b.Name, func(t *testing.T) {
			b.Require(t)
			run := newRun()
			key := "skewed"
			seedCounters(t, b, run, []string{key})
			inSync := newRegistry(t, b, run, registry.WithTTL(ttl), registry.WithIdleBetweenTries(20*time.Millisecond))
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			iterations := scale(10)

			// Two goroutines on the real clock contend with two in the
			// bubble. The bubble has a pool of its own: connections carry
			// timers, which must not cross a bubble's boundary.
			var workers, wg sync.WaitGroup
			for g := range 2 {
				workers.Go(func() {
					if err := fencedIncrements(ctx, inSync, b, run, key, iterations); err != nil {
						t.Errorf("in-sync worker %d: %v", g, err)
					}
				})
			}
			// The in-sync side of the expiry check, outside the bubble, once
			// the in-sync workers are done: it takes the key from the
			// skewed holder and reads the new lease.
			skewedHolds := make(chan struct{})
			var next testdb.Lease
			takenOver := make(chan error)
			wg.Go(func() {
				<-skewedHolds
				workers.Wait()
				l := inSync.Obtain(key)
				err := l.LockContext(ctx)
				if err == nil {
					next = b.MustLease(t, run, key)
					err = l.UnlockContext(ctx)
				}
				takenOver <- err
			})

			var skewedYear int
			var held testdb.Lease
			realTime := time.NewTicker(time.Millisecond)
			defer realTime.Stop()
			synctest.Test(t, func(t *testing.T) {
				defer paceWithRealTime(realTime.C)()
				// A context of the bubble's own: selecting on a channel made
				// outside would keep the bubble's clock from moving. The go
				// test timeout bounds the wait instead.
				ctx := context.Background()
				skewedYear = time.Now().Year()
				pool := b
				var err error
				if pool.DB, err = sql.Open(b.Driver, b.DSN); err != nil {
					t.Fatal(err)
				}
				defer pool.DB.Close()
				// No listener: a goroutine blocked on the network would
				// keep the bubble's clock from moving.
				repo, err := jdbc.NewLockRepository(ctx, pool.DB, jdbc.WithRegion(run))
				if err != nil {
					t.Fatal(err)
				}
				skewed, err := registry.New(repo, registry.WithTTL(ttl), registry.WithIdleBetweenTries(20*time.Millisecond),
					registry.WithErrorHandler(func(string, error) {}))
				if err != nil {
					t.Fatal(err)
				}
				defer skewed.Close(context.Background())
				var inner sync.WaitGroup
				for g := range 2 {
					inner.Go(func() {
						if err := fencedIncrements(ctx, skewed, pool, run, key, iterations); err != nil {
							t.Errorf("skewed worker %d: %v", g, err)
						}
					})
				}
				inner.Wait()

				l := skewed.Obtain(key)
				if err := l.LockContext(ctx); err != nil {
					t.Fatal(err)
				}
				held = pool.MustLease(t, run, key)
				now, err := pool.Clock(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if left := time.Duration(held.Expires-now) * time.Microsecond; left <= 0 || left > ttl {
					t.Errorf("the skewed registry's lease has %v left by the database's clock, want (0, %v]", left, ttl)
				}
				close(skewedHolds)
				if err := <-takenOver; err != nil {
					t.Fatal(err)
				}
				l.UnlockContext(ctx) // the lease is lost by now: ErrLockLost is expected
			})
			workers.Wait()
			wg.Wait()
			if acquiredAt := next.Expires - ttl.Microseconds(); acquiredAt < held.Expires {
				t.Errorf("the in-sync registry took the key %v before the skewed holder's lease expired",
					time.Duration(held.Expires-acquiredAt)*time.Microsecond)
			}
			n, _ := counter(t, b, run, key)
			if want := int64(4 * iterations); n != want {
				t.Errorf("counter %d, want %d", n, want)
			}
			t.Logf("%s: process clock in %d against the database's in %d: %d fenced increments by 2+2 goroutines exact; "+
				"the skewed holder's lease ran the TTL by the database's clock and the in-sync client took the key %v after it expired",
				b.Name, skewedYear, time.Now().Year(), n,
				(time.Duration(next.Expires-ttl.Microseconds()-held.Expires) * time.Microsecond).Round(time.Millisecond))
		})
	}
}

// paceWithRealTime keeps a bubble's clock from running ahead of the real
// one, and returns the function that stops it; call it in the bubble.
// A bubble's clock jumps to the next timer whenever all its goroutines
// wait, so a goroutine that waits for a writer outside the bubble (SQLite's
// busy handler sleeps between its probes) would otherwise see its whole
// busy_timeout, and its lease's TTL, pass in no real time and give up on a
// lease the database still grants. The pacer waits for a real tick (a
// channel made outside, so not a wait that lets the clock move) before
// each millisecond it lets pass: the bubble's clock advances at most a
// millisecond per real millisecond, and never while its goroutines work.
func paceWithRealTime(realTick <-chan time.Time) (stop func()) {
	done := make(chan struct{})
	var pacer sync.WaitGroup
	pacer.Go(func() {
		for {
			select {
			case <-done:
				return
			case <-realTick:
			}
			time.Sleep(time.Millisecond)
		}
	})
	return func() { close(done); pacer.Wait() }
}

// fencedIncrements takes key's lock n times, each time incrementing its
// counter guarded by the token.
func fencedIncrements(ctx context.Context, reg *registry.Registry, b testdb.Backend, run, key string, n int) error {
	for range n {
		l := reg.Obtain(key)
		if err := l.LockContext(ctx); err != nil {
			return err
		}
		err := incrementFenced(ctx, b, run, key, l.Token())
		if uerr := l.UnlockContext(ctx); err == nil {
			err = uerr
		}
		if err != nil {
			return err
		}
	}
	return nil
}

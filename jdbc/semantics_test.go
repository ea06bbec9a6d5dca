package jdbc_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockreg/lockreg/jdbc"
	"github.com/lockreg/lockreg/registry"
)

// Claims of the README and the package documentation that no other test
// checks.

// attempts is a repository that reports each acquisition attempt that did
// not take the lease, so that a test can wait for a waiter to have asked.
type attempts struct {
	*jdbc.LockRepository
	missed chan struct{}
}

func (a attempts) report(ok bool, err error) {
	if !ok && err == nil {
		select {
		case a.missed <- struct{}{}:
		default:
		}
	}
}

func (a attempts) Acquire(ctx context.Context, key string, ttl time.Duration) (registry.Lease, bool, error) {
	lease, ok, err := a.LockRepository.Acquire(ctx, key, ttl)
	a.report(ok, err)
	return lease, ok, err
}

func (a attempts) AcquireOrWait(ctx context.Context, key string, ttl time.Duration) (registry.Lease, bool, error) {
	lease, ok, err := a.LockRepository.AcquireOrWait(ctx, key, ttl)
	a.report(ok, err)
	return lease, ok, err
}

// Without a listener waiters do not queue: a process that releases and asks
// again at once takes the lease ahead of a waiting one, as in Spring
// Integration (with a listener it queues behind it; see
// TestWaitersAreServedInArrivalOrderAndTheReleaserQueuesBehindThem).
func TestWithoutAListenerAReleaserAskingAgainGoesAheadOfAWaiter(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		region := randomRegion()
		r0, err := registry.New(newRepo(t, db, jdbc.WithRegion(region)))
		if err != nil {
			t.Fatal(err)
		}
		defer r0.Close(context.Background())
		waiter := attempts{newRepo(t, db, jdbc.WithRegion(region)), make(chan struct{}, 2)}
		r1, err := registry.New(waiter, registry.WithIdleBetweenTries(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		defer r1.Close(context.Background())

		l0 := r0.Obtain("k")
		if err := l0.LockContext(t.Context()); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		got := make(chan error, 1)
		go func() { got <- r1.Obtain("k").LockContext(ctx) }()
		// The waiter asks, subscribes to announcements, asks once more and
		// then waits for its idle interval.
		for range 2 {
			select {
			case <-waiter.missed:
			case <-time.After(30 * time.Second):
				t.Fatal("the waiter did not ask twice")
			}
		}
		if err := l0.UnlockContext(t.Context()); err != nil {
			t.Fatal(err)
		}
		ok, err := l0.TryLockContext(t.Context())
		if err != nil || !ok {
			t.Fatalf("asking again after the release: %v, %v; want the lease, ahead of the waiter", ok, err)
		}
		cancel()
		if err := <-got; !errors.Is(err, context.Canceled) {
			t.Fatalf("the waiter: %v, want it still waiting until canceled", err)
		}
		if err := l0.UnlockContext(t.Context()); err != nil {
			t.Fatal(err)
		}
	})
}

// A client that polls does not take an expired lease while a listening
// waiter of another client is queued for it.
func TestAPollingClientDoesNotTakeAnExpiredLeaseAheadOfAListeningWaiter(t *testing.T) {
	forEachPostgres(t, func(t *testing.T, db testDB, l jdbc.Listener) {
		region := randomRegion()
		holder := newRepo(t, db, jdbc.WithRegion(region))
		poller := newRepo(t, db, jdbc.WithRegion(region))
		waiting := newRepo(t, db, jdbc.WithRegion(region), jdbc.WithListener(l), jdbc.WithQueueTTL(time.Hour))
		r, err := registry.New(waiting, registry.WithIdleBetweenTries(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close(context.Background())

		mustAcquire(t, holder, "k", time.Second) // and never renewed nor released
		ctx, cancel := context.WithCancel(t.Context())
		got := make(chan error, 1)
		go func() { got <- r.Obtain("k").LockContext(ctx) }()
		waitQueued(t, db, region, "k", waiting.ClientID())
		for {
			lease, ok := db.Lease(t, table, region, jdbc.UUIDKey("k"))
			if ok && lease.Remaining < 0 {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if _, ok, err := poller.Acquire(t.Context(), "k", longTTL); err != nil || ok {
			t.Fatalf("the polling client's Acquire: %v, %v; want false, as a listening waiter is ahead", ok, err)
		}
		cancel()
		<-got
	})
}

// A custom release query is not what Close runs: Close expires this
// client's leftover rows in place, with the default statement, and leaves
// other clients' rows alone.
func TestCloseWithACustomReleaseQueryOnlyExpiresItsOwnLeftoverRows(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		region := randomRegion()
		other := newRepo(t, db, jdbc.WithRegion(region))
		mustAcquire(t, other, "held-by-other", longTTL)
		// An earlier process with the same client id left a row behind.
		earlier := newRepo(t, db, jdbc.WithRegion(region))
		mustAcquire(t, earlier, "left-behind", longTTL)
		repo, err := jdbc.NewLockRepository(t.Context(), db.DB, jdbc.WithRegion(region), jdbc.WithClientID(earlier.ClientID()),
			jdbc.WithReleaseQuery(`DELETE FROM {prefix}LOCK WHERE REGION = :region`))
		if err != nil {
			t.Fatal(err)
		}
		if err := repo.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
		left, ok := db.Lease(t, table, region, jdbc.UUIDKey("left-behind"))
		if !ok || left.Remaining >= 0 {
			t.Fatalf("the row left behind: present %v, %v remaining; want it kept and expired", ok, left.Remaining)
		}
		if held, ok := db.Lease(t, table, region, jdbc.UUIDKey("held-by-other")); !ok || held.ClientID != other.ClientID() || held.Remaining <= 0 {
			t.Fatalf("the other client's row: present %v, %+v; want it untouched", ok, held)
		}
	})
}

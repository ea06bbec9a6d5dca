package redislock_test

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockreg/lockreg/internal/testdb"
	"github.com/lockreg/lockreg/redislock"
	"github.com/lockreg/lockreg/registry"
)

// queued returns how many waiters key's queue holds.
func queued(t testing.TB, c redis.UniversalClient, region, key string) int64 {
	t.Helper()
	n, err := c.ZCard(ctxT(t), lockKey(redislock.DefaultPrefix, region, key)+":queue").Result()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// Waiters in other registries take the lock in the order they began to
// wait: each release hands it to the first.
func TestWaitersAreServedInTheOrderTheyBeganToWait(t *testing.T) {
	c := testdb.Redis(t, "")
	ctx := ctxT(t)
	region := randomRegion()
	reg := func() *registry.Registry {
		// Places outlast any stall of a loaded machine: a lapsed place
		// would requeue its waiter at the end.
		repo := newRepo(t, c, redislock.WithRegion(region), redislock.WithQueueTTL(time.Minute))
		return newRegistry(t, repo, registry.WithIdleBetweenTries(20*time.Millisecond))
	}
	holder := reg().Obtain("fifo")
	if err := holder.LockContext(ctx); err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		order []int
		wg    sync.WaitGroup
	)
	for i := range 3 {
		r := reg()
		wg.Go(func() {
			l := r.Obtain("fifo")
			if err := l.LockContext(ctx); err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			if err := l.UnlockContext(ctx); err != nil {
				t.Error(err)
			}
		})
		waitFor(t, ctx, "the waiter's place", func() bool { return queued(t, c, region, "fifo") == int64(i+1) })
	}
	if err := holder.UnlockContext(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if want := []int{0, 1, 2}; !slices.Equal(order, want) {
		t.Fatalf("waiters took the lock in order %v, want %v", order, want)
	}
}

// A client that releases and asks again at once does not overtake a
// waiter: the release handed the lease to it.
func TestAReleaserThatAsksAgainAtOnceQueuesBehindTheWaiter(t *testing.T) {
	c := testdb.Redis(t, "")
	ctx := ctxT(t)
	region := randomRegion()
	regA := newRegistry(t, newRepo(t, c, redislock.WithRegion(region)))
	regB := newRegistry(t, newRepo(t, c, redislock.WithRegion(region)))
	a := regA.Obtain("k")
	if err := a.LockContext(ctx); err != nil {
		t.Fatal(err)
	}
	locked := make(chan error, 1)
	go func() { locked <- regB.Obtain("k").LockContext(ctx) }()
	waitFor(t, ctx, "the waiter's place", func() bool { return queued(t, c, region, "k") == 1 })
	if err := a.UnlockContext(ctx); err != nil {
		t.Fatal(err)
	}
	if a.TryLock() {
		t.Fatal("the releaser took the lock again ahead of the waiter")
	}
	if err := <-locked; err != nil {
		t.Fatal(err)
	}
	if err := regB.Obtain("k").UnlockContext(ctx); err != nil {
		t.Error(err)
	}
}

// A release hands the lease to the first waiter with a new token and the
// length it asked for; the waiter only reads it.
func TestAReleaseHandsTheLeaseToTheFirstWaiter(t *testing.T) {
	c := testdb.Redis(t, "")
	ctx := ctxT(t)
	region := randomRegion()
	a := newRepo(t, c, redislock.WithRegion(region))
	b := newRepo(t, c, redislock.WithRegion(region))
	first, ok, err := a.Acquire(ctx, "k", time.Minute)
	if err != nil || !ok {
		t.Fatalf("Acquire = %v, %v", ok, err)
	}
	if _, ok, err := b.AcquireOrWait(ctx, "k", 30*time.Second); err != nil || ok {
		t.Fatalf("AcquireOrWait while held = %v, %v; want false, nil", ok, err)
	}
	if err := a.Release(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	lease, ok, err := b.HandedLease(ctx, "k")
	if err != nil || !ok {
		t.Fatalf("HandedLease of the waiter = %v, %v; want the lease", ok, err)
	}
	if lease.Token <= first.Token || lease.TTL <= 0 || lease.TTL > 30*time.Second {
		t.Errorf("handed lease %+v after token %d: want a greater token and at most the 30 s asked for", lease, first.Token)
	}
	if err := b.Release(ctx, "k"); err != nil {
		t.Fatal(err)
	}
}

// A waiter that leaves without taking a lease handed to it gives it back,
// to the next waiter.
func TestALeaseHandedToAWaiterThatLeavesIsPassedOn(t *testing.T) {
	c := testdb.Redis(t, "")
	ctx := ctxT(t)
	region := randomRegion()
	a := newRepo(t, c, redislock.WithRegion(region))
	b := newRepo(t, c, redislock.WithRegion(region))
	d := newRepo(t, c, redislock.WithRegion(region))
	if _, ok, err := a.Acquire(ctx, "k", time.Minute); err != nil || !ok {
		t.Fatalf("Acquire = %v, %v", ok, err)
	}
	for _, w := range []*redislock.Repository{b, d} {
		if _, ok, err := w.AcquireOrWait(ctx, "k", time.Minute); err != nil || ok {
			t.Fatalf("AcquireOrWait while held = %v, %v; want false, nil", ok, err)
		}
	}
	if err := a.Release(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	lk := lockKey(redislock.DefaultPrefix, region, "k")
	if owner, _ := c.Get(ctx, lk).Result(); owner != b.ClientID() {
		t.Fatalf("after the release the lock holds %q, want the first waiter %q", owner, b.ClientID())
	}
	if err := b.Leave(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if owner, _ := c.Get(ctx, lk).Result(); owner != d.ClientID() {
		t.Fatalf("after the first waiter left the lock holds %q, want the next waiter %q", owner, d.ClientID())
	}
	if _, ok, err := d.HandedLease(ctx, "k"); err != nil || !ok {
		t.Fatalf("HandedLease of the next waiter = %v, %v; want the lease", ok, err)
	}
	if err := d.Release(ctx, "k"); err != nil {
		t.Fatal(err)
	}
}

// A waiter that stops asking loses its place after WithQueueTTL: a
// release then frees the lease rather than handing it to the vanished
// waiter.
func TestALapsedPlaceIsSkipped(t *testing.T) {
	c := testdb.Redis(t, "")
	ctx := ctxT(t)
	region := randomRegion()
	const place = 100 * time.Millisecond
	a := newRepo(t, c, redislock.WithRegion(region))
	gone := newRepo(t, c, redislock.WithRegion(region), redislock.WithQueueTTL(place))
	if _, ok, err := a.Acquire(ctx, "k", time.Minute); err != nil || !ok {
		t.Fatalf("Acquire = %v, %v", ok, err)
	}
	if _, ok, err := gone.AcquireOrWait(ctx, "k", time.Minute); err != nil || ok {
		t.Fatalf("AcquireOrWait while held = %v, %v", ok, err)
	}
	time.Sleep(3 * place)
	if err := a.Release(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := gone.HandedLease(ctx, "k"); ok {
		t.Fatal("the lease was handed to a waiter whose place had lapsed")
	}
	other := newRepo(t, c, redislock.WithRegion(region))
	if _, ok, err := other.Acquire(ctx, "k", time.Minute); err != nil || !ok {
		t.Fatalf("Acquire after the release = %v, %v; want the lease", ok, err)
	}
}

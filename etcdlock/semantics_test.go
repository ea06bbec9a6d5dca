package etcdlock_test

import (
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockreg/lockreg/etcdlock"
	"github.com/lockreg/lockreg/registry"
)

// The repository's own promises, on the shared cluster.

func mustAcquire(t *testing.T, r registry.Repository, key string, ttl time.Duration) registry.Lease {
	t.Helper()
	l, ok, err := r.Acquire(ctxT(t), key, ttl)
	if err != nil || !ok {
		t.Fatalf("Acquire(%q) = %v, %v", key, ok, err)
	}
	return l
}

// A renewal, and an Acquire of a held lock, rewrite the entry in place
// and keep its token; a release and a new acquisition, or a hand-off to
// the next waiter, give a greater one.
func TestTokensAcrossRenewalReleaseAndHandOff(t *testing.T) {
	c := sharedClient(t)
	region := randomRegion()
	a := newRepo(t, c, etcdlock.WithRegion(region))
	b := newRepo(t, c, etcdlock.WithRegion(region))
	const key = "token"
	first := mustAcquire(t, a, key, time.Second)
	if err := a.Renew(ctxT(t), key, 5*time.Second); err != nil { // longer than granted: a new lease
		t.Fatal(err)
	}
	if again := mustAcquire(t, a, key, 2*time.Second); again.Token != first.Token {
		t.Fatalf("re-acquisition by the holder changed the token from %d to %d", first.Token, again.Token)
	}
	if err := a.Release(ctxT(t), key); err != nil {
		t.Fatal(err)
	}
	second := mustAcquire(t, a, key, time.Minute)
	if second.Token <= first.Token {
		t.Fatalf("token %d after release and re-acquisition, not above %d", second.Token, first.Token)
	}
	if _, ok, err := b.AcquireOrWait(ctxT(t), key, time.Minute); ok || err != nil {
		t.Fatalf("AcquireOrWait of a held lock = %v, %v", ok, err)
	}
	if err := a.Release(ctxT(t), key); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := a.Acquire(ctxT(t), key, time.Minute); ok || err != nil {
		t.Fatalf("Acquire overtook the waiter: %v, %v", ok, err)
	}
	handed, ok, err := b.HandedLease(ctxT(t), key)
	if err != nil || !ok {
		t.Fatalf("HandedLease after the holder released = %v, %v", ok, err)
	}
	if handed.Token <= second.Token {
		t.Fatalf("handed token %d not above %d", handed.Token, second.Token)
	}
	if err := b.Release(ctxT(t), key); err != nil {
		t.Fatal(err)
	}
}

// entryLease returns the lease of the only entry of key's lock in region.
func entryLease(t *testing.T, c *clientv3.Client, region, key string) clientv3.LeaseID {
	t.Helper()
	resp, err := c.Get(ctxT(t), etcdlock.DefaultPrefix+region+"\x00", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 {
		t.Fatalf("%d entries in the region, want 1", len(resp.Kvs))
	}
	return clientv3.LeaseID(resp.Kvs[0].Lease)
}

// A lease that the cluster no longer has (revoked here behind the
// repository's back, as the cluster expires a lease whose holder it did
// not hear from) is not revived by a renewal, and its key is not written
// again: another client takes the lock.
func TestRenewalNeverRevivesALeaseTheClusterEnded(t *testing.T) {
	c := sharedClient(t)
	region := randomRegion()
	a := newRepo(t, c, etcdlock.WithRegion(region))
	b := newRepo(t, c, etcdlock.WithRegion(region))
	const key = "revoked"
	mustAcquire(t, a, key, time.Minute)
	if _, err := c.Revoke(ctxT(t), entryLease(t, c, region, key)); err != nil {
		t.Fatal(err)
	}
	if err := a.Renew(ctxT(t), key, time.Minute); !errors.Is(err, registry.ErrLockLost) {
		t.Fatalf("Renew of a lease the cluster revoked: %v, want ErrLockLost", err)
	}
	mustAcquire(t, b, key, time.Minute)
	if err := a.Release(ctxT(t), key); !errors.Is(err, registry.ErrLockLost) {
		t.Fatalf("Release after the loss: %v, want ErrLockLost", err)
	}
	if err := b.Release(ctxT(t), key); err != nil {
		t.Fatal(err)
	}
}

// A hold whose deadline passed is revoked by its own repository, even
// with a sub-second TTL, well before the cluster would expire its lease
// (granted for a whole second at least); a renewal after that is refused.
func TestShortTTLEndsAtItsDeadline(t *testing.T) {
	c := sharedClient(t)
	region := randomRegion()
	a := newRepo(t, c, etcdlock.WithRegion(region))
	b := newRepo(t, c, etcdlock.WithRegion(region))
	const key = "short"
	mustAcquire(t, a, key, 200*time.Millisecond)
	if _, ok, _ := b.Acquire(ctxT(t), key, time.Minute); ok {
		t.Fatal("another client took a fresh lease")
	}
	deadline := time.Now().Add(900 * time.Millisecond)
	for {
		if _, ok, err := b.Acquire(ctxT(t), key, time.Minute); err != nil {
			t.Fatal(err)
		} else if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a 200 ms lease was not free within 900 ms")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := a.Renew(ctxT(t), key, time.Minute); !errors.Is(err, registry.ErrLockLost) {
		t.Fatalf("Renew after the deadline: %v, want ErrLockLost", err)
	}
}

// A release wakes exactly the next waiter, whichever repository it is in,
// and the others not at all.
func TestReleaseWakesOnlyTheNextWaiter(t *testing.T) {
	c := sharedClient(t)
	region := randomRegion()
	const key = "herd"
	holder := newRepo(t, c, etcdlock.WithRegion(region))
	mustAcquire(t, holder, key, time.Minute)
	var waiters []*etcdlock.Repository
	var wakes []chan struct{}
	for range 4 {
		w := newRepo(t, c, etcdlock.WithRegion(region))
		if _, ok, err := w.AcquireOrWait(ctxT(t), key, time.Minute); ok || err != nil {
			t.Fatalf("AcquireOrWait = %v, %v", ok, err)
		}
		ch := make(chan struct{}, 1)
		t.Cleanup(w.Notify(key, ch))
		waiters, wakes = append(waiters, w), append(wakes, ch)
	}
	time.Sleep(300 * time.Millisecond) // let the watches start
	for _, ch := range wakes {
		select {
		case <-ch:
		default:
		}
	}
	releaser := registry.Repository(holder)
	for i, w := range waiters {
		if err := releaser.Release(ctxT(t), key); err != nil {
			t.Fatal(err)
		}
		select {
		case <-wakes[i]:
		case <-time.After(5 * time.Second):
			t.Fatalf("waiter %d was not woken by the release before it", i)
		}
		time.Sleep(200 * time.Millisecond) // a herd would have woken the others by now
		for j := i + 1; j < len(wakes); j++ {
			select {
			case <-wakes[j]:
				t.Fatalf("the release woke waiter %d too, not only waiter %d", j, i)
			default:
			}
		}
		if _, ok, err := w.HandedLease(ctxT(t), key); !ok || err != nil {
			t.Fatalf("waiter %d woken but holds nothing: %v, %v", i, ok, err)
		}
		releaser = w
	}
	if err := releaser.Release(ctxT(t), key); err != nil {
		t.Fatal(err)
	}
}

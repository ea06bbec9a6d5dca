package registrytest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lockreg/lockreg/registry"
)

// runCache checks the lock-object cache rules that Spring got wrong in 2026
// (GH-11041, GH-11146, GH-11157, GH-11172).
func runCache(t *testing.T, b Backend) {
	for _, tc := range []struct {
		name string
		test func(*testing.T, Backend)
	}{
		{"HeldLockIsNeverEvicted", testHeldNotEvicted},
		{"AwaitedLockIsNeverEvicted", testAwaitedNotEvicted},
		{"LocksOfOneKeyExcludeEachOtherAcrossEviction", testExcludeAcrossEviction},
		{"HeldLockDoesNotBlockOtherKeys", testNoBlockOtherKeys},
		{"ExpireUnusedOlderThanDropsOnlyIdleLocks", testExpireUnused},
		{"CapacityBoundsIdleLocksInLRUOrder", testLRUOrder},
		{"ConcurrentObtainAndLockOfManyKeys", testConcurrentObtain},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.test(t, b) })
	}
}

func testHeldNotEvicted(t *testing.T, b Backend) {
	r := newRegistry(t, b, registry.WithCacheCapacity(2))
	held := r.Obtain(key(t, "held"))
	must(t, held.LockContext(ctxT(t)))
	for i := range 5 {
		r.Obtain(key(t, fmt.Sprint(i)))
	}
	if r.Obtain(key(t, "held")) != held {
		t.Fatal("a held lock was evicted from the cache")
	}
	must(t, held.UnlockContext(ctxT(t)))
}

func testAwaitedNotEvicted(t *testing.T, b Backend) {
	r := newRegistry(t, b, registry.WithCacheCapacity(1))
	held := r.Obtain(key(t))
	must(t, held.LockContext(ctxT(t)))
	done := make(chan error)
	go func() {
		l := r.Obtain(key(t))
		if err := l.LockContext(ctxT(t)); err != nil {
			done <- err
			return
		}
		done <- l.UnlockContext(ctxT(t))
	}()
	time.Sleep(5 * short)
	for i := range 5 {
		r.Obtain(key(t, fmt.Sprint(i)))
	}
	if r.Obtain(key(t)) != held {
		t.Fatal("an awaited lock was evicted from the cache")
	}
	must(t, held.UnlockContext(ctxT(t)))
	must(t, <-done)
}

func testExcludeAcrossEviction(t *testing.T, b Backend) {
	r := newRegistry(t, b, registry.WithCacheCapacity(1))
	old := r.Obtain(key(t))
	r.Obtain(key(t, "other")) // evicts old
	fresh := r.Obtain(key(t))
	if fresh == old {
		t.Fatal("capacity 1 did not evict the idle lock")
	}
	must(t, old.LockContext(ctxT(t)))
	if fresh.TryLock() {
		t.Fatal("a lock obtained after eviction was taken while the evicted one was held")
	}
	r.Obtain(key(t, "third")) // cache churn while held must not matter
	must(t, fresh.UnlockContext(ctxT(t)) /* unlocking through either object works */)
	if !old.TryLock() {
		t.Fatal("the evicted object could not be locked again")
	}
	if fresh.TryLock() {
		t.Fatal("two objects of one key were held at once")
	}
	old.Unlock()
}

func testNoBlockOtherKeys(t *testing.T, b Backend) {
	r := newRegistry(t, b, registry.WithCacheCapacity(1))
	held := r.Obtain(key(t, "held"))
	must(t, held.LockContext(ctxT(t)))
	for i := range 300 { // enough keys to collide in any striping scheme
		l := r.Obtain(key(t, fmt.Sprint(i)))
		if !l.TryLock() {
			t.Fatalf("key %d could not be locked while an unrelated key was held", i)
		}
		l.Unlock()
	}
	must(t, held.UnlockContext(ctxT(t)))
}

func testExpireUnused(t *testing.T, b Backend) {
	r := newRegistry(t, b)
	held, idle := r.Obtain(key(t, "held")), r.Obtain(key(t, "idle"))
	must(t, held.LockContext(ctxT(t)))
	r.ExpireUnusedOlderThan(time.Hour)
	if r.Obtain(key(t, "idle")) != idle {
		t.Fatal("a recently used lock was expired")
	}
	r.ExpireUnusedOlderThan(-time.Second)
	if r.Obtain(key(t, "idle")) == idle {
		t.Fatal("an unused lock survived ExpireUnusedOlderThan(-1s)")
	}
	if r.Obtain(key(t, "held")) != held {
		t.Fatal("ExpireUnusedOlderThan dropped a held lock")
	}
	must(t, held.UnlockContext(ctxT(t)))
}

func testLRUOrder(t *testing.T, b Backend) {
	r := newRegistry(t, b, registry.WithCacheCapacity(3))
	a, b2, c := r.Obtain(key(t, "a")), r.Obtain(key(t, "b")), r.Obtain(key(t, "c"))
	r.Obtain(key(t, "a")) // a is now the most recently used
	r.Obtain(key(t, "d")) // evicts b, the least recently used
	if r.Obtain(key(t, "a")) != a || r.Obtain(key(t, "c")) != c {
		t.Fatal("a recently used lock was evicted")
	}
	if r.Obtain(key(t, "b")) == b2 {
		t.Fatal("the least recently used lock was not evicted")
	}
}

func testConcurrentObtain(t *testing.T, b Backend) {
	r := newRegistry(t, b, registry.WithCacheCapacity(17))
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				l := r.Obtain(key(t, fmt.Sprint((i*7+g)%60)))
				if err := l.LockContext(ctxT(t)); err != nil {
					t.Error(err)
					return
				}
				if err := l.UnlockContext(context.Background()); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
}

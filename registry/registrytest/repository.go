package registrytest

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockreg/lockreg/registry"
)

// runRepository checks the Repository contract directly, after Spring's
// DefaultLockRepositoryTests.
func runRepository(t *testing.T, b Backend) {
	for _, tc := range []struct {
		name string
		test func(*testing.T, Backend)
	}{
		{"AcquireFreeKeySucceeds", testAcquireFree},
		{"AcquireHeldByAnotherClientFails", testAcquireHeldByOther},
		{"ReacquireByOwnerSucceeds", testReacquireByOwner},
		{"ExpiredLeaseIsTakenOver", testExpiredTakenOver},
		{"ReleaseLetsAnotherClientAcquire", testReleaseLetsOther},
		{"ReleaseOfAnotherClientsLeaseIsLockLost", testReleaseOfOthers},
		{"ReleaseAfterTakeoverIsLockLost", testReleaseAfterTakeover},
		{"RenewKeepsLeaseBeyondTTL", testRenewKeeps},
		{"RenewNeverRevivesExpiredLease", testRenewNeverRevives},
		{"RenewOfAnotherClientsLeaseIsLockLost", testRenewOfOthers},
		{"RenewAndReleaseAfterDeleteExpiredAreLockLost", testAfterDeleteExpired},
		{"OnlyOneOfTwentyRacingClientsAcquires", testRacingClients},
		{"KeysOfAnyShapeWork", testKeyShapes},
		{"CloseRefusesAcquireButAllowsRelease", testCloseRefuses},
		{"CloseKeepsHeldLeases", testCloseKeepsHeld},
		{"NonPositiveTTLIsRejected", testRepoBadTTL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			distributed(t, b)
			tc.test(t, b)
		})
	}
}

func testAcquireFree(t *testing.T, b Backend) {
	if !acquire(t, client(t, b), key(t), ttl) {
		t.Fatal("Acquire of a free key reported false")
	}
}

func testAcquireHeldByOther(t *testing.T, b Backend) {
	a, c := client(t, b), client(t, b)
	acquire(t, a, key(t), time.Minute)
	if acquire(t, c, key(t), time.Minute) {
		t.Fatal("a second client acquired a held lease")
	}
}

func testReacquireByOwner(t *testing.T, b Backend) {
	a := client(t, b)
	acquire(t, a, key(t), ttl)
	if !acquire(t, a, key(t), time.Minute) {
		t.Fatal("the owner could not re-acquire its own lease")
	}
	time.Sleep(past)
	// The re-acquisition extended the lease, so it outlives the first TTL.
	if acquire(t, client(t, b), key(t), time.Minute) {
		t.Fatal("re-acquisition did not extend the lease")
	}
}

func testExpiredTakenOver(t *testing.T, b Backend) {
	a, c := client(t, b), client(t, b)
	acquire(t, a, key(t), ttl)
	time.Sleep(past)
	if !acquire(t, c, key(t), time.Minute) {
		t.Fatal("an expired lease was not taken over")
	}
	if acquire(t, a, key(t), time.Minute) {
		t.Fatal("the former owner took back a lease that another client holds")
	}
}

func testReleaseLetsOther(t *testing.T, b Backend) {
	a, c := client(t, b), client(t, b)
	acquire(t, a, key(t), time.Minute)
	must(t, a.Release(ctxT(t), key(t)))
	if !acquire(t, c, key(t), time.Minute) {
		t.Fatal("a released lease could not be acquired")
	}
}

func testReleaseOfOthers(t *testing.T, b Backend) {
	a, c := client(t, b), client(t, b)
	acquire(t, a, key(t), time.Minute)
	wantLost(t, c.Release(ctxT(t), key(t)))
	if acquire(t, c, key(t), time.Minute) {
		t.Fatal("a foreign release removed the owner's lease")
	}
}

func testReleaseAfterTakeover(t *testing.T, b Backend) {
	a, c := client(t, b), client(t, b)
	acquire(t, a, key(t), ttl)
	time.Sleep(past)
	acquire(t, c, key(t), time.Minute)
	wantLost(t, a.Release(ctxT(t), key(t)))
	must(t, c.Release(ctxT(t), key(t)))
}

func testRenewKeeps(t *testing.T, b Backend) {
	a, c := client(t, b), client(t, b)
	acquire(t, a, key(t), renewTTL)
	must(t, a.Renew(ctxT(t), key(t), time.Minute))
	time.Sleep(2 * renewTTL)
	if acquire(t, c, key(t), time.Minute) {
		t.Fatal("a renewed lease was taken over after its first TTL")
	}
}

func testRenewNeverRevives(t *testing.T, b Backend) {
	a, c := client(t, b), client(t, b)
	acquire(t, a, key(t), ttl)
	time.Sleep(past)
	wantLost(t, a.Renew(ctxT(t), key(t), time.Minute))
	if !acquire(t, c, key(t), time.Minute) {
		t.Fatal("a failed renewal revived the expired lease")
	}
}

func testRenewOfOthers(t *testing.T, b Backend) {
	a, c := client(t, b), client(t, b)
	acquire(t, a, key(t), time.Minute)
	wantLost(t, c.Renew(ctxT(t), key(t), time.Minute))
}

func testAfterDeleteExpired(t *testing.T, b Backend) {
	if b.DeleteExpired == nil {
		t.Skip("requires Backend.DeleteExpired, which this backend does not provide")
	}
	a := client(t, b)
	acquire(t, a, key(t), ttl)
	time.Sleep(past)
	must(t, b.DeleteExpired(ctxT(t)))
	wantLost(t, a.Renew(ctxT(t), key(t), time.Minute))
	wantLost(t, a.Release(ctxT(t), key(t)))
}

func testRacingClients(t *testing.T, b Backend) {
	const n = 20
	clients := make([]registry.Repository, n)
	for i := range clients {
		clients[i] = client(t, b)
	}
	var (
		won   atomic.Int32
		wg    sync.WaitGroup
		start = make(chan struct{})
	)
	for _, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, ok, err := c.Acquire(ctxT(t), key(t), time.Minute)
			for errors.Is(err, registry.ErrTransient) {
				_, ok, err = c.Acquire(ctxT(t), key(t), time.Minute)
			}
			if err != nil {
				t.Error(err)
			}
			if ok {
				won.Add(1)
			}
		}()
	}
	close(start)
	wg.Wait()
	if got := won.Load(); got != 1 {
		t.Fatalf("%d of %d racing clients acquired the lease, want exactly 1", got, n)
	}
}

func testKeyShapes(t *testing.T, b Backend) {
	keys := map[string]string{
		"empty":         "",
		"invalid UTF-8": "\xff\xfe\xfd",
		"NUL bytes":     "a\x00b",
		"SQL":           "'; DROP TABLE INT_LOCK; --",
		"UUID-shaped":   "6F9619FF-8B86-D011-B42D-00CF4FC964FF",
		"1 MiB":         strings.Repeat("k", 1<<20),
	}
	for name, k := range keys {
		t.Run(name, func(t *testing.T) {
			a, c := client(t, b), client(t, b)
			if name != "empty" && name != "UUID-shaped" {
				k = key(t) + k // unique across runs, same shape
			}
			if !acquire(t, a, k, time.Minute) {
				t.Fatal("could not acquire")
			}
			if acquire(t, c, k, time.Minute) {
				t.Fatal("a second client acquired the same key")
			}
			must(t, a.Release(ctxT(t), k))
		})
	}
}

func testCloseRefuses(t *testing.T, b Backend) {
	a := b.NewRepository(t)
	acquire(t, a, key(t), time.Minute)
	must(t, a.Close(ctxT(t)))
	if _, _, err := a.Acquire(ctxT(t), key(t, "other"), time.Minute); !errors.Is(err, registry.ErrClosed) {
		t.Fatalf("Acquire after Close: got %v, want registry.ErrClosed", err)
	}
	must(t, a.Release(ctxT(t), key(t)))
}

func testCloseKeepsHeld(t *testing.T, b Backend) {
	a, c := b.NewRepository(t), client(t, b)
	acquire(t, a, key(t), time.Minute)
	must(t, a.Close(ctxT(t)))
	if acquire(t, c, key(t), time.Minute) {
		t.Fatal("Close deleted a lease that was still held")
	}
	must(t, a.Release(context.Background(), key(t)))
}

func testRepoBadTTL(t *testing.T, b Backend) {
	a := client(t, b)
	if _, _, err := a.Acquire(ctxT(t), key(t), 0); !errors.Is(err, registry.ErrInvalidTTL) {
		t.Fatalf("Acquire with ttl 0: got %v, want registry.ErrInvalidTTL", err)
	}
	acquire(t, a, key(t), time.Minute)
	if err := a.Renew(ctxT(t), key(t), -time.Second); !errors.Is(err, registry.ErrInvalidTTL) {
		t.Fatalf("Renew with ttl -1s: got %v, want registry.ErrInvalidTTL", err)
	}
}

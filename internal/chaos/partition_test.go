//go:build chaos

package chaos

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockreg/lockreg/internal/testdb"
	"github.com/lockreg/lockreg/registry"
)

// A holder cut off from the database by a partition, with keep-alive on,
// sees Done close while its lease is still unexpired by the database's
// clock; another client takes the key only after the lease expired; and a
// write guarded by the cut-off holder's token is refused.
func TestAPartitionedHolderSeesDoneBeforeItsLeaseExpires(t *testing.T) {
	const ttl = 3 * time.Second
	b := open(t, "postgres-pgx")[0]
	b.Require(t)
	for round := range scale(1) {
		run := newRun()
		key := "partitioned"
		seedCounters(t, b, run, []string{key})

		p := startProxy(t, serverAddr(t, b))
		cutOff := b
		cutOff.DB = testdb.OpenPool(t, b.Driver, proxiedDSN(t, b, p.Addr()))

		regA := newRegistry(t, cutOff, run, registry.WithKeepAlive(), registry.WithTTL(ttl),
			registry.WithIdleBetweenTries(50*time.Millisecond))
		regB := newRegistry(t, b, run, registry.WithTTL(ttl), registry.WithIdleBetweenTries(50*time.Millisecond))
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()

		a := regA.Obtain(key)
		if err := a.LockContext(ctx); err != nil {
			t.Fatal(err)
		}
		tokenA, doneA := a.Token(), a.Done()
		cutAfterRenewal(t, p, ttl, doneA, func() int64 { return b.MustLease(t, run, key).Expires })
		now, err := b.Clock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		last := b.MustLease(t, run, key) // final: A cannot reach the database
		if now >= last.Expires {
			t.Errorf("Done closed %v after the lease expired by the database's clock",
				time.Duration(now-last.Expires)*time.Microsecond)
		}

		l := regB.Obtain(key)
		if err := l.LockContext(ctx); err != nil {
			t.Fatal(err)
		}
		tokenB := l.Token()
		next := b.MustLease(t, run, key)
		if acquiredAt := next.Expires - ttl.Microseconds(); acquiredAt < last.Expires {
			t.Errorf("the other client acquired %v before the partitioned holder's lease expired",
				time.Duration(last.Expires-acquiredAt)*time.Microsecond)
		}
		if err := incrementFenced(ctx, b, run, key, tokenB); err != nil {
			t.Errorf("the new holder's write: %v", err)
		}
		if err := incrementFenced(ctx, b, run, key, tokenA); !errors.Is(err, errRefused) {
			t.Errorf("a write with the partitioned holder's stale token %d (new token %d): %v, want it refused", tokenA, tokenB, err)
		}
		if n, _ := counter(t, b, run, key); n != 1 {
			t.Errorf("counter %d, want 1", n)
		}
		if err := l.UnlockContext(ctx); err != nil {
			t.Error(err)
		}

		p.Heal()
		if err := a.UnlockContext(ctx); !errors.Is(err, registry.ErrLockLost) {
			t.Errorf("unlock by the partitioned holder after healing: %v, want ErrLockLost", err)
		}
		t.Logf("round %d: partition cut while holding; Done closed %v before expiry by the database's clock; "+
			"the other client acquired %v after expiry; stale token %d refused after token %d",
			round, (time.Duration(last.Expires-now) * time.Microsecond).Round(time.Millisecond),
			(time.Duration(next.Expires-ttl.Microseconds()-last.Expires) * time.Microsecond).Round(time.Millisecond), tokenA, tokenB)
	}
}

//go:build chaos

package chaos

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/lockreg/lockreg/internal/testdb"
	"github.com/lockreg/lockreg/redislock"
	"github.com/lockreg/lockreg/registry"
)

func redisServerMillis(t *testing.T, ctx context.Context, c *redis.Client) int64 {
	t.Helper()
	now, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	return now.UnixMilli()
}

func pexpireTime(t *testing.T, ctx context.Context, c *redis.Client, key string) int64 {
	t.Helper()
	d, err := c.PExpireTime(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	return d.Milliseconds()
}

// A holder cut off from Redis by a partition, with keep-alive on, sees
// Done close while its lease is still unexpired by Redis' clock; another
// client takes the key only after the lease expired, with a greater token;
// and the cut-off holder's unlock after healing reports the lease lost.
func TestRedisPartitionedHolderSeesDoneBeforeItsLeaseExpires(t *testing.T) {
	const ttl = 3 * time.Second
	direct := testdb.Redis(t, "")
	p := startProxy(t, direct.Options().Addr)
	cutOff := testdb.Redis(t, p.Addr())
	region, key := "chaos-"+uuid.NewString(), "partitioned"
	lockKey := redislock.DefaultPrefix + "{" + region + ":" + key + "}"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	newReg := func(c *redis.Client, opts ...registry.Option) *registry.Registry {
		repo, err := redislock.New(c, redislock.WithRegion(region), redislock.WithErrorHandler(func(error) {}))
		if err != nil {
			t.Fatal(err)
		}
		opts = append([]registry.Option{registry.WithTTL(ttl), registry.WithIdleBetweenTries(50 * time.Millisecond),
			registry.WithErrorHandler(func(string, error) {})}, opts...)
		r, err := registry.New(repo, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close(context.Background()) })
		return r
	}
	regA, regB := newReg(cutOff, registry.WithKeepAlive()), newReg(direct)

	a := regA.Obtain(key)
	if err := a.LockContext(ctx); err != nil {
		t.Fatal(err)
	}
	tokenA, doneA := a.Token(), a.Done()
	cutAfterRenewal(t, p, ttl, doneA, func() int64 { return pexpireTime(t, ctx, direct, lockKey) })
	now := redisServerMillis(t, ctx, direct)
	last := pexpireTime(t, ctx, direct, lockKey) // final: A cannot reach Redis
	if now >= last {
		t.Errorf("Done closed %d ms after the lease expired by Redis' clock", now-last)
	}

	b := regB.Obtain(key)
	if err := b.LockContext(ctx); err != nil {
		t.Fatal(err)
	}
	// The acquire script set the expiry to its start + ttl by Redis' clock.
	if acquiredAt := pexpireTime(t, ctx, direct, lockKey) - ttl.Milliseconds(); acquiredAt <= last {
		t.Errorf("the other client acquired at %d ms by Redis' clock, not after the partitioned holder's lease expired at %d ms",
			acquiredAt, last)
	}
	tokenB := b.Token()
	if tokenB <= tokenA {
		t.Errorf("the new holder's token %d is not greater than the partitioned holder's %d", tokenB, tokenA)
	}
	if err := b.UnlockContext(ctx); err != nil {
		t.Error(err)
	}

	p.Heal()
	if err := a.UnlockContext(ctx); !errors.Is(err, registry.ErrLockLost) {
		t.Errorf("unlock by the partitioned holder after healing: %v, want ErrLockLost", err)
	}
	t.Logf("Done closed %d ms before the lease's expiry by Redis' clock; tokens %d then %d", last-now, tokenA, tokenB)
}

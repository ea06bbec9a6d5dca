package redislock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockreg/lockreg/internal/testdb"
	"github.com/lockreg/lockreg/redislock"
	"github.com/lockreg/lockreg/registry"
)

// A release wakes a waiter of another repository through pub/sub: with
// an idle interval of an hour, only the announcement can make it try
// again within the test's 30 s.
func TestAReleaseWakesAWaiterThatPollsOnceAnHour(t *testing.T) {
	c := testdb.Redis(t, "")
	ctx := ctxT(t)
	region := randomRegion()
	regA := newRegistry(t, newRepo(t, c, redislock.WithRegion(region)))
	regB := newRegistry(t, newRepo(t, c, redislock.WithRegion(region)), registry.WithIdleBetweenTries(time.Hour))
	a := regA.Obtain("woken")
	if err := a.LockContext(ctx); err != nil {
		t.Fatal(err)
	}
	locked := make(chan error, 1)
	go func() { locked <- regB.Obtain("woken").LockContext(ctx) }()
	waitFor(t, ctx, "the waiter's subscription", func() bool {
		return subscribers(ctx, c, redislock.DefaultPrefix, region) == 1
	})
	if err := a.UnlockContext(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-locked; err != nil {
		t.Fatalf("the waiter: %v", err)
	}
	if err := regB.Obtain("woken").UnlockContext(ctx); err != nil {
		t.Error(err)
	}
}

// Keys, owners and expiry live in Redis as the package documentation
// says, so operators can read them with redis-cli.
func TestTheLockKeyHoldsTheOwnerWithTheLeasesExpiry(t *testing.T) {
	c := testdb.Redis(t, "")
	ctx := ctxT(t)
	region := randomRegion()
	repo := newRepo(t, c, redislock.WithRegion(region), redislock.WithClientID("worker-1"))
	lease, ok, err := repo.Acquire(ctx, "invoice-42", time.Minute)
	if err != nil || !ok {
		t.Fatalf("Acquire = %v, %v", ok, err)
	}
	lk := lockKey(redislock.DefaultPrefix, region, "invoice-42")
	if owner, err := c.Get(ctx, lk).Result(); err != nil || owner != "worker-1" {
		t.Errorf("GET %s = %q, %v; want the client id", lk, owner, err)
	}
	if ttl, err := c.PTTL(ctx, lk).Result(); err != nil || ttl <= 0 || ttl > time.Minute {
		t.Errorf("PTTL %s = %v, %v; want at most the lease's minute", lk, ttl, err)
	}
	if tok, err := c.HGet(ctx, lk+":token", "token").Int64(); err != nil || tok != lease.Token {
		t.Errorf("HGET %s:token token = %d, %v; want the lease's token %d", lk, tok, err, lease.Token)
	}
	if err := repo.Release(ctx, "invoice-42"); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Exists(ctx, lk).Result(); err != nil || n != 0 {
		t.Errorf("EXISTS %s after Release = %d, %v; want 0", lk, n, err)
	}
	if ttl, err := c.PTTL(ctx, lk+":token").Result(); err != nil || ttl <= 0 {
		t.Errorf("the token counter has PTTL %v, %v after Release; want it kept, with an expiry", ttl, err)
	}
}

// Prefixes and regions partition the locks.
func TestPrefixesAndRegionsDoNotShareLocks(t *testing.T) {
	c := testdb.Redis(t, "")
	ctx := ctxT(t)
	region := randomRegion()
	holder := newRepo(t, c, redislock.WithRegion(region))
	if _, ok, err := holder.Acquire(ctx, "k", time.Minute); err != nil || !ok {
		t.Fatalf("Acquire = %v, %v", ok, err)
	}
	for name, repo := range map[string]*redislock.Repository{
		"same region":  newRepo(t, c, redislock.WithRegion(region)),
		"other region": newRepo(t, c, redislock.WithRegion(region+"-2")),
		"other prefix": newRepo(t, c, redislock.WithRegion(region), redislock.WithPrefix("other:")),
	} {
		_, ok, err := repo.Acquire(ctx, "k", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if want := name != "same region"; ok != want {
			t.Errorf("%s: Acquire of a key held in %q = %v, want %v", name, region, ok, want)
		}
		if ok {
			repo.Release(ctx, "k")
		}
	}
	if err := holder.Release(ctx, "k"); err != nil {
		t.Error(err)
	}
}

func TestBadOptionsAreRejected(t *testing.T) {
	c := redis.NewClient(testdb.RedisOptions()) // New does no I/O
	defer c.Close()
	for name, opts := range map[string][]redislock.Option{
		"empty prefix":       {redislock.WithPrefix("")},
		"prefix with brace":  {redislock.WithPrefix("a{b")},
		"prefix with space":  {redislock.WithPrefix("a b")},
		"long prefix":        {redislock.WithPrefix(string(make([]byte, 65)))},
		"empty region":       {redislock.WithRegion("")},
		"region with colon":  {redislock.WithRegion("a:b")},
		"region with brace":  {redislock.WithRegion("a}")},
		"region with NUL":    {redislock.WithRegion("a\x00")},
		"invalid UTF-8":      {redislock.WithRegion("\xff")},
		"empty client id":    {redislock.WithClientID("")},
		"client id w/ space": {redislock.WithClientID("a b")},
		"nil error handler":  {redislock.WithErrorHandler(nil)},
	} {
		if _, err := redislock.New(c, opts...); !errors.Is(err, redislock.ErrInvalidOption) {
			t.Errorf("%s: got %v, want ErrInvalidOption", name, err)
		}
	}
	if _, err := redislock.New(nil); !errors.Is(err, redislock.ErrInvalidOption) {
		t.Errorf("nil client: got %v, want ErrInvalidOption", err)
	}
	if _, err := redislock.New((*redis.Client)(nil)); !errors.Is(err, redislock.ErrInvalidOption) {
		t.Errorf("typed nil client: got %v, want ErrInvalidOption", err)
	}
}

// An operation whose context is done returns its error.
func TestADoneContextIsReturned(t *testing.T) {
	repo := newRepo(t, testdb.Redis(t, ""))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := repo.Acquire(ctx, "k", time.Minute); !errors.Is(err, context.Canceled) {
		t.Errorf("Acquire: %v, want context.Canceled", err)
	}
	if err := repo.Renew(ctx, "k", time.Minute); !errors.Is(err, context.Canceled) {
		t.Errorf("Renew: %v, want context.Canceled", err)
	}
	if err := repo.Release(ctx, "k"); !errors.Is(err, context.Canceled) {
		t.Errorf("Release: %v, want context.Canceled", err)
	}
}

package redislock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockreg/lockreg/redislock"
	"github.com/lockreg/lockreg/registry"
)

// errorLog collects what an error handler receives.
type errorLog struct {
	mu   sync.Mutex
	errs []error
}

func (l *errorLog) add(err error) {
	l.mu.Lock()
	l.errs = append(l.errs, err)
	l.mu.Unlock()
}

func (l *errorLog) all() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]error(nil), l.errs...)
}

func newRegistry(t testing.TB, repo registry.Repository, opts ...registry.Option) *registry.Registry {
	t.Helper()
	opts = append([]registry.Option{registry.WithErrorHandler(func(string, error) {})}, opts...)
	r, err := registry.New(repo, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(context.Background()) })
	return r
}

// waitFor polls cond every 10 ms until it holds or ctx is done.
func waitFor(t testing.TB, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("gave up waiting for %s: %v", what, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// subscribers returns how many connections listen on the channel of
// prefix and region.
func subscribers(ctx context.Context, c redis.UniversalClient, prefix, region string) int64 {
	ch := prefix + "{" + region + "}:released"
	n, err := c.PubSubNumSub(ctx, ch).Result()
	if err != nil {
		return -1
	}
	return n[ch]
}

// A restart of a server without persistence (here a kill -9 and a start)
// loses every lease: the holder finds its lease lost at its next renewal
// and Done closes; a waiter in another registry, which polls only once an
// hour, is woken when its pub/sub connection comes back (the connection's
// failure goes to its error handler) and takes the key; and its token is
// still greater than the lost holder's, since tokens follow the server's
// clock once the counter is gone.
func TestARestartThatLosesTheLeaseEndsTheHoldAndTokensKeepIncreasing(t *testing.T) {
	s := startServer(t)
	ctx := ctxT(t)
	region := randomRegion()
	var logB errorLog
	repoA := newRepo(t, s.client(), redislock.WithRegion(region))
	repoB := newRepo(t, s.client(), redislock.WithRegion(region), redislock.WithErrorHandler(logB.add))
	regA := newRegistry(t, repoA, registry.WithTTL(3*time.Second), registry.WithKeepAlive(),
		registry.WithIdleBetweenTries(50*time.Millisecond))
	regB := newRegistry(t, repoB, registry.WithIdleBetweenTries(time.Hour))

	a := regA.Obtain("restarted")
	if err := a.LockContext(ctx); err != nil {
		t.Fatal(err)
	}
	tokenA, doneA := a.Token(), a.Done()
	b := regB.Obtain("restarted")
	locked := make(chan error, 1)
	go func() { locked <- b.LockContext(ctx) }()
	probe := s.client()
	waitFor(t, ctx, "the waiter's subscription", func() bool {
		return subscribers(ctx, probe, redislock.DefaultPrefix, region) == 1
	})

	s.restart()
	if err := <-locked; err != nil {
		t.Fatalf("the waiter after the restart: %v", err)
	}
	select {
	case <-doneA:
	case <-ctx.Done():
		t.Fatal("the holder's Done did not close although the restart lost its lease")
	}
	if tokenB := b.Token(); tokenB <= tokenA {
		t.Errorf("token %d after the restart is not greater than the lost holder's %d", tokenB, tokenA)
	}
	if len(logB.all()) == 0 {
		t.Error("the waiter's error handler heard nothing of its pub/sub connection's failure")
	}
	if err := a.UnlockContext(ctx); !errors.Is(err, registry.ErrLockLost) {
		t.Errorf("unlock by the holder whose lease the restart lost: %v, want ErrLockLost", err)
	}
	if err := b.UnlockContext(ctx); err != nil {
		t.Error(err)
	}
}

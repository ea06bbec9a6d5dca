package redislock_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockreg/lockreg/internal/testdb"
	"github.com/lockreg/lockreg/redislock"
	"github.com/lockreg/lockreg/registry"
)

// acquireErr returns the error of one Acquire on c.
func acquireErr(t *testing.T, c redis.UniversalClient) error {
	t.Helper()
	repo, err := redislock.New(c, redislock.WithRegion(randomRegion()))
	if err != nil {
		t.Fatal(err)
	}
	// Close would release the lease the failed Acquire may have taken,
	// and fail as the Acquire did.
	t.Cleanup(func() { repo.Close(context.Background()) })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, _, err = repo.Acquire(ctx, "k", time.Minute)
	if err == nil {
		t.Fatal("Acquire succeeded")
	}
	t.Logf("Acquire: %v", err)
	return err
}

func wantTransient(t *testing.T, err error) {
	t.Helper()
	if !errors.Is(err, registry.ErrTransient) {
		t.Fatalf("got %v, want an error wrapping registry.ErrTransient", err)
	}
}

func TestAServerThatIsDownIsTransient(t *testing.T) {
	s := startServer(t)
	c := s.client(func(o *redis.Options) { o.MaxRetries = -1 })
	s.kill()
	wantTransient(t, acquireErr(t, c))
}

// BUSY: the server runs a script beyond busy-reply-threshold.
func TestABusyServerIsTransient(t *testing.T) {
	s := startServer(t, "--busy-reply-threshold", "50")
	ctx := ctxT(t)
	busy := s.client()
	ran := make(chan error, 1)
	go func() { ran <- busy.Eval(ctx, "while true do end", nil).Err() }()
	probe := s.client(func(o *redis.Options) { o.MaxRetries = -1 })
	waitFor(t, ctx, "the busy script", func() bool { return redis.HasErrorPrefix(probe.Ping(ctx).Err(), "BUSY ") })
	err := acquireErr(t, probe)
	if err := probe.ScriptKill(ctx).Err(); err != nil {
		t.Error(err)
	}
	<-ran
	wantTransient(t, err)
}

// READONLY: a failover made the node a replica.
func TestAReplicaIsTransient(t *testing.T) {
	primary := startServer(t)
	replica := startServer(t, "--replicaof", "127.0.0.1", strconv.Itoa(primary.port))
	err := acquireErr(t, replica.client(func(o *redis.Options) { o.MaxRetries = -1 }))
	if !redis.IsReadOnlyError(err) {
		t.Errorf("got %v, want READONLY", err)
	}
	wantTransient(t, err)
}

// CLUSTERDOWN: a cluster node that serves no slot yet.
func TestAClusterThatIsDownIsTransient(t *testing.T) {
	s := startServer(t, "--cluster-enabled", "yes")
	err := acquireErr(t, s.client(func(o *redis.Options) { o.MaxRetries = -1 }))
	if !redis.IsClusterDownError(err) {
		t.Errorf("got %v, want CLUSTERDOWN", err)
	}
	wantTransient(t, err)
}

// A key of the lock's name that holds something else is the caller's
// problem, not the network's.
func TestAForeignValueAtTheLockKeyIsNotTransient(t *testing.T) {
	c := testdb.Redis(t, "")
	region := randomRegion()
	ctx := ctxT(t)
	lk := lockKey(redislock.DefaultPrefix, region, "k")
	if err := c.HSet(ctx, lk, "not", "a lock").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Del(context.Background(), lk) })
	repo, err := redislock.New(c, redislock.WithRegion(region))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { repo.Close(context.Background()) }) // fails as the Acquire did
	_, _, err = repo.Acquire(ctx, "k", time.Minute)
	if err == nil || errors.Is(err, registry.ErrTransient) {
		t.Fatalf("Acquire on a hash: got %v, want a WRONGTYPE error that is not transient", err)
	}
}

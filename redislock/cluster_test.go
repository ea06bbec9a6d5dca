package redislock_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockreg/lockreg/redislock"
	"github.com/lockreg/lockreg/registry"
	"github.com/lockreg/lockreg/registry/registrytest"
)

// startCluster starts a Redis Cluster of one node that serves every slot
// and returns a cluster client of it. A script whose keys hash to
// different slots fails there with CROSSSLOT.
func startCluster(t *testing.T) *redis.ClusterClient {
	t.Helper()
	s := startServer(t, "--cluster-enabled", "yes")
	ctx := ctxT(t)
	node := s.client()
	if err := node.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", 0, 16383).Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "cluster_state:ok", func() bool {
		info, err := node.ClusterInfo(ctx).Result()
		return err == nil && strings.Contains(info, "cluster_state:ok")
	})
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{s.Addr()}})
	t.Cleanup(func() { c.Close() })
	return c
}

// The lock key and its token counter share a slot whatever the key, so
// every script runs on a cluster, also for keys that contain braces.
func TestOnAClusterTheKeysOfALockShareASlot(t *testing.T) {
	c := startCluster(t)
	ctx := ctxT(t)
	region := randomRegion()
	repo := newRepo(t, c, redislock.WithRegion(region))
	for _, key := range []string{"plain", "{tag}", "}", "{", "a}b{c", "{}", ""} {
		lk := lockKey(redislock.DefaultPrefix, region, key)
		lockSlot, err := c.ClusterKeySlot(ctx, lk).Result()
		if err != nil {
			t.Fatal(err)
		}
		tokenSlot, err := c.ClusterKeySlot(ctx, lk+":token").Result()
		if err != nil {
			t.Fatal(err)
		}
		if lockSlot != tokenSlot {
			t.Errorf("key %q: the lock is in slot %d, its token counter in %d", key, lockSlot, tokenSlot)
		}
		if _, ok, err := repo.Acquire(ctx, key, time.Minute); err != nil || !ok {
			t.Fatalf("Acquire %q = %v, %v", key, ok, err)
		}
		if err := repo.Renew(ctx, key, time.Minute); err != nil {
			t.Fatalf("Renew %q: %v", key, err)
		}
		if err := repo.Release(ctx, key); err != nil {
			t.Fatalf("Release %q: %v", key, err)
		}
	}
}

// The conformance suite passes on a cluster too, through a
// *redis.ClusterClient, pub/sub included.
func TestConformanceOnACluster(t *testing.T) {
	c := startCluster(t)
	region := randomRegion()
	registrytest.Run(t, registrytest.Backend{
		NewRepository: func(t testing.TB) registry.Repository {
			return newRepo(t, c, redislock.WithRegion(region))
		},
		DeleteExpired: func(ctx context.Context) error {
			return c.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
				return forgetTokens(ctx, node, redislock.DefaultPrefix, region)
			})
		},
	})
}

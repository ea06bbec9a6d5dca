package redislock_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/lockreg/lockreg/redislock"
)

// The tests use the Redis server of testdb.RedisOptions
// (LOCKREG_REDIS_ADDR, default 127.0.0.1:6379, logical database 3), in
// regions of their own; the fault tests start servers of their own (see
// server_test.go).

// helperEnv names the job of a child process of the test binary (see
// TestHelperProcess).
const helperEnv = "LOCKREG_REDISLOCK_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(m.Run()) // a child process: it exits from its test
	}
	goleak.VerifyTestMain(m)
}

func randomRegion() string { return "test-" + uuid.NewString() }

// newRepo returns a repository on c in a random region of its own (a later
// WithRegion in opts wins), closed when t ends.
func newRepo(t testing.TB, c redis.UniversalClient, opts ...redislock.Option) *redislock.Repository {
	t.Helper()
	opts = append([]redislock.Option{redislock.WithRegion(randomRegion()), redislock.WithErrorHandler(func(error) {})}, opts...)
	r, err := redislock.New(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Close(context.Background()); err != nil {
			t.Errorf("closing repository: %v", err)
		}
	})
	return r
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// lockKey is the Redis key of key's lock, as package doc describes it.
func lockKey(prefix, region, key string) string { return prefix + "{" + region + ":" + key + "}" }

// forgetTokens deletes the token counters of a region, as a server that
// lost its data would.
func forgetTokens(ctx context.Context, c redis.UniversalClient, prefix, region string) error {
	iter := c.Scan(ctx, 0, prefix+"{"+region+":*}:token", 1000).Iterator()
	for iter.Next(ctx) {
		if err := c.Del(ctx, iter.Val()).Err(); err != nil {
			return err
		}
	}
	return iter.Err()
}

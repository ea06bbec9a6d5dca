package testdb

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisOptions are the options of a client of the tests' Redis server:
// LOCKREG_REDIS_ADDR (by default 127.0.0.1:6379), logical database 3, in
// which tests keep to regions of their own. Each call returns a new value,
// for the caller to change.
func RedisOptions() *redis.Options {
	addr := os.Getenv("LOCKREG_REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	return &redis.Options{Addr: addr, DB: 3}
}

// Redis returns a client with RedisOptions, connecting to addr instead
// when it is not empty (a proxy in front of the server), closed when t
// ends. It skips t (fails it when CI=true) when the server does not answer
// a PING within 3 s.
func Redis(t testing.TB, addr string) *redis.Client {
	t.Helper()
	opts := RedisOptions()
	if addr != "" {
		opts.Addr = addr
	}
	c := redis.NewClient(opts)
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		Unreachable(t, fmt.Sprintf("Redis unreachable at %s (set LOCKREG_REDIS_ADDR, or start redis-server): %v", opts.Addr, err))
	}
	return c
}

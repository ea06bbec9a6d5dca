package main

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestQuickRedis runs the Redis contestants briefly; it needs Redis at
// LOCKREG_REDIS_ADDR and skips with a message without it (fails when
// CI=true).
func TestQuickRedis(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: envOr("LOCKREG_REDIS_ADDR", "127.0.0.1:6379")})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	err := c.Ping(ctx).Err()
	cancel()
	c.Close()
	if err != nil {
		msg := "Redis unreachable (set LOCKREG_REDIS_ADDR): " + err.Error()
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skipf("skipped: %s (start redis-server; with CI=true this fails)", msg)
	}
	names := []string{"lockreg-redis", "redis-setnx"}
	scenarios := []string{"uncontended", "parallel", "contended", "safety"}
	recs := runJSON(t, "-quick", "-duration", "300ms", "-warmup", "50ms", "-only", strings.Join(names, ","),
		"-scenarios", strings.Join(scenarios, ","))
	checkRecords(t, recs, names, scenarios)
}

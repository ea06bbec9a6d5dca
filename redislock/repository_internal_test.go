package redislock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/lockreg/lockreg/internal/testdb"
)

func testRepo(t *testing.T) (*Repository, *redis.Client) {
	t.Helper()
	c := testdb.Redis(t, "")
	r, err := New(c, WithRegion("test-"+uuid.NewString()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(context.Background()) })
	return r, c
}

// go-redis retries a command whose connection failed, so a release whose
// reply was lost may run twice: the second run finds the key gone and
// must still report success, not a lost lease. A release of a lease that
// expired unreleased is still lost.
func TestARetriedReleaseThatTookEffectSucceeds(t *testing.T) {
	r, _ := testRepo(t)
	ctx := context.Background()
	lease, ok, err := r.Acquire(ctx, "k", time.Minute)
	if err != nil || !ok {
		t.Fatalf("Acquire = %v, %v", ok, err)
	}
	for i := range 2 { // the attempt, and its retry
		if ok, err := r.release(ctx, "k", lease.Token); err != nil || !ok {
			t.Fatalf("release run %d = %v, %v; want true", i+1, ok, err)
		}
	}
	if ok, err := r.release(ctx, "k", lease.Token+1); err != nil || ok {
		t.Fatalf("release of a token never released = %v, %v; want false", ok, err)
	}
	if _, _, err := r.Acquire(ctx, "short", time.Millisecond); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	if err := r.Release(ctx, "short"); err == nil {
		t.Fatal("Release of an expired lease succeeded")
	}
}

// Close releases a lease that a failed call may have left behind, and
// none that is held.
func TestCloseReleasesOnlyLeasesLeftBehind(t *testing.T) {
	r, c := testRepo(t)
	ctx := context.Background()
	if _, ok, err := r.Acquire(ctx, "held", time.Minute); err != nil || !ok {
		t.Fatalf("Acquire = %v, %v", ok, err)
	}
	// An acquisition whose script ran but whose reply was lost.
	h, err := r.begin("acquire", "left")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := r.acquire(ctx, "left", time.Minute, false); err != nil || !ok {
		t.Fatalf("acquire = %v, %v", ok, err)
	}
	r.end("left", h, 0, false, errors.New("the reply was lost"))

	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
	exists := func(key string) bool {
		n, err := c.Exists(ctx, keyNames(r.cfg.prefix, r.cfg.region, key).lock).Result()
		if err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
	if exists("left") {
		t.Error("Close kept the lease left behind")
	}
	if !exists("held") {
		t.Error("Close released a held lease")
	}
	if err := r.Release(ctx, "held"); err != nil {
		t.Errorf("Release after Close: %v", err)
	}
	if err := c.Ping(ctx).Err(); err != nil {
		t.Errorf("the client after the repository's Close: %v; Close must leave it open", err)
	}
}

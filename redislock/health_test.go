package redislock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockreg/lockreg/redislock"
	"github.com/lockreg/lockreg/registry"
)

// Check for readiness probes: a ping, and the listener once started.

func TestCheckPassesOnALiveServerOnceTheListenerListens(t *testing.T) {
	s := startServer(t)
	repo := newRepo(t, s.client())
	if err := repo.Check(ctxT(t)); err != nil {
		t.Fatalf("Check before the listener started: %v", err)
	}
	heard := make(chan struct{}, 1)
	defer repo.Notify("k", heard)()
	<-heard // the listener wakes every waiter once it has subscribed
	if err := repo.Check(ctxT(t)); err != nil {
		t.Fatal(err)
	}
}

func TestCheckOfAStoppedServerIsTransient(t *testing.T) {
	s := startServer(t)
	repo := newRepo(t, s.client(func(o *redis.Options) { o.MaxRetries = -1 }))
	s.kill()
	if err := repo.Check(ctxT(t)); !errors.Is(err, registry.ErrTransient) {
		t.Fatalf("got %v, want a transient error", err)
	}
}

// The server answers but refuses the listener's SUBSCRIBE: leases work,
// and Check says the notifications are down.
func TestCheckReportsAListenerThatCannotSubscribe(t *testing.T) {
	s := startServer(t)
	c := s.client()
	failed := make(chan struct{}, 1)
	repo := newRepo(t, c, redislock.WithErrorHandler(func(error) {
		select {
		case failed <- struct{}{}:
		default:
		}
	}))
	heard := make(chan struct{}, 1)
	defer repo.Notify("k", heard)()
	<-heard
	admin := s.client()
	if err := admin.Do(ctxT(t), "ACL", "SETUSER", "default", "-subscribe").Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.Do(ctxT(t), "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	<-failed
	if err := repo.Check(ctxT(t)); !errors.Is(err, registry.ErrListenerDown) {
		t.Fatalf("got %v, want an error wrapping registry.ErrListenerDown", err)
	}
	if _, ok, err := repo.Acquire(ctxT(t), "k", time.Minute); !ok || err != nil {
		t.Fatalf("Acquire while the listener is down: %v, %v", ok, err)
	}
}

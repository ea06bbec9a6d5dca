package redislock_test

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockreg/lockreg/redislock"
	"github.com/lockreg/lockreg/registry"
)

// A registry whose locks hold leases in Redis, as in the README.
func ExampleNew() {
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"}) // or redis.NewClusterClient
	defer c.Close()                                              // the repository never closes it
	repo, err := redislock.New(c, redislock.WithRegion("billing"))
	if err != nil {
		panic(err)
	}
	locks, err := registry.New(repo, registry.WithTTL(30*time.Second), registry.WithKeepAlive())
	if err != nil {
		panic(err)
	}
	defer locks.Close(ctx)

	l := locks.Obtain("invoice-42")
	if err := l.LockContext(ctx); err != nil {
		panic(err)
	}
	defer l.Unlock()
	_ = l.Token() // pass it to storage that refuses older tokens
}

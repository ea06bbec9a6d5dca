package redislock_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/lockreg/lockreg/internal/testdb"
	"github.com/lockreg/lockreg/redislock"
	"github.com/lockreg/lockreg/registry"
	"github.com/lockreg/lockreg/registry/registrytest"
)

// TestConformance runs the shared repository suite on Redis, in a region
// of its own. Its DeleteExpired loses the token counters, as a restarted
// server without persistence does (expired leases are gone already), so
// the suite checks that tokens keep increasing without them; its missing
// storage is a client with credentials the server refuses.
func TestConformance(t *testing.T) {
	c := testdb.Redis(t, "")
	region := randomRegion()
	registrytest.Run(t, registrytest.Backend{
		NewRepository: func(t testing.TB) registry.Repository {
			return newRepo(t, c, redislock.WithRegion(region))
		},
		DeleteExpired: func(ctx context.Context) error {
			return forgetTokens(ctx, c, redislock.DefaultPrefix, region)
		},
		NewMissingStorage: func(t testing.TB) registry.Repository {
			opts := testdb.RedisOptions()
			opts.Username, opts.Password, opts.MaxRetries = "lockreg-nobody", "wrong", -1
			bad := redis.NewClient(opts)
			t.Cleanup(func() { bad.Close() })
			r, err := redislock.New(bad, redislock.WithRegion(region))
			if err != nil {
				t.Fatal(err)
			}
			return r // the suite closes it, which fails as its Lock did
		},
	})
}

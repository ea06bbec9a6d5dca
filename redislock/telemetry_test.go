package redislock_test

import (
	"testing"

	"github.com/lockreg/lockreg/internal/testdb"
	"github.com/lockreg/lockreg/redislock"
	"github.com/lockreg/lockreg/registry"
)

// The repository names its backend, region and client for the registry's
// metrics, spans and logs.
func TestDescribeNamesRedisRegionAndClient(t *testing.T) {
	c := testdb.Redis(t, "")
	r := newRepo(t, c, redislock.WithRegion("described"), redislock.WithClientID("client-1"))
	if d := r.Describe(); d != (registry.Description{Backend: "redis", Region: "described", Client: "client-1"}) {
		t.Fatalf("Describe() = %+v", d)
	}
}

package etcdlock_test

import (
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/lockreg/lockreg/etcdlock"
	tel "github.com/lockreg/lockreg/internal/telemetry"
	"github.com/lockreg/lockreg/internal/telemetry/telemetrytest"
)

// The requests an uncontended acquisition, renewal and release cost, as
// the package documentation counts them: a grant and a transaction, a
// grant and a transaction, a revocation.
func TestRequestsPerOperation(t *testing.T) {
	c := sharedClient(t)
	m := telemetrytest.NewMetrics()
	r := newRepo(t, c, etcdlock.WithMeterProvider(m.Provider))
	count := func() map[string]uint64 {
		got := map[string]uint64{}
		for _, op := range []string{"grant", "acquire", "read", "revoke"} {
			got[op] = m.Count(t, "lockreg.etcd.request.duration", tel.Operation.String(op), attribute.String("lockreg.outcome", "ok"))
		}
		return got
	}
	before := count()
	mustAcquire(t, r, "k", time.Minute)
	step := func(what string, want map[string]uint64) {
		t.Helper()
		got := count()
		for op, n := range want {
			if d := got[op] - before[op]; d != n {
				t.Errorf("%s: %d %s requests, want %d", what, d, op, n)
			}
		}
		before = got
	}
	step("acquire", map[string]uint64{"grant": 1, "acquire": 1, "read": 0, "revoke": 0})
	if err := r.Renew(ctxT(t), "k", time.Minute); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // the old lease's revocation runs in the background
	step("renew", map[string]uint64{"grant": 1, "acquire": 1, "read": 0, "revoke": 1})
	if err := r.Release(ctxT(t), "k"); err != nil {
		t.Fatal(err)
	}
	step("release", map[string]uint64{"grant": 0, "acquire": 0, "read": 0, "revoke": 1})
}

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

// TestHandOffWithinTheSlackKeepsTheLease: a client with a password (no
// spares, no keep-alives) grants its place in a queue a second longer than
// the TTL, so a waiter handed the lock within that second of the grant
// holds it on the place's lease, with the read that finds its turn alone;
// later it moves to a new lease (a grant, a transaction, the old lease
// revoked).
func TestHandOffWithinTheSlackKeepsTheLease(t *testing.T) {
	c := sharedClient(t)
	m := telemetrytest.NewMetrics()
	region := randomRegion()
	a := newRepo(t, c, etcdlock.WithRegion(region))
	b := newRepo(t, c, etcdlock.WithRegion(region), etcdlock.WithMeterProvider(m.Provider))
	step := requestSteps(t, m)
	mustAcquire(t, a, "k", time.Minute)
	g0 := time.Now()
	if _, ok, err := b.AcquireOrWait(ctxT(t), "k", time.Minute); ok || err != nil {
		t.Fatalf("AcquireOrWait of a held lock = %v, %v", ok, err)
	}
	g1 := time.Now()
	step("queue", map[string]uint64{"grant": 1, "acquire": 1})
	if err := a.Release(ctxT(t), "k"); err != nil {
		t.Fatal(err)
	}
	h0 := time.Now()
	if _, ok, err := b.HandedLease(ctxT(t), "k"); !ok || err != nil {
		t.Fatalf("HandedLease after the holder released = %v, %v", ok, err)
	}
	moves := slackKeepAlives(t, g0, g1, h0, time.Now()) // one move where the spare would get a keep-alive
	time.Sleep(100 * time.Millisecond)                  // an old lease's revocation runs in the background
	step("hand-off", map[string]uint64{"read": 1, "grant": moves, "acquire": moves, "revoke": moves})
	if err := b.Release(ctxT(t), "k"); err != nil {
		t.Fatal(err)
	}
}

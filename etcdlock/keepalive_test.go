package etcdlock_test

import (
	"context"
	"fmt"
	"net/url"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.opentelemetry.io/otel/attribute"
	"go.uber.org/zap"

	"github.com/lockreg/lockreg/etcdlock"
	tel "github.com/lockreg/lockreg/internal/telemetry"
	"github.com/lockreg/lockreg/internal/telemetry/telemetrytest"
	"github.com/lockreg/lockreg/registry"
	"github.com/lockreg/lockreg/registry/registrytest"
)

// These tests run spare leases and keep-alives on a member of their own
// without authentication, as a client with no password (or with TLS
// certificates) uses them; a client with a user name and password keeps
// none (Repository.keepAlives).

// openMember starts one etcd member without authentication, closed when
// t ends, and returns a client of it.
func openMember(t *testing.T) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{startMember(t)}, DialTimeout: 15 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// startMember starts one etcd member without authentication, closed when
// t ends, and returns its client endpoint.
func startMember(t *testing.T) string {
	t.Helper()
	peer, err := freeURL()
	if err != nil {
		t.Fatal(err)
	}
	client, err := freeURL()
	if err != nil {
		t.Fatal(err)
	}
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir = "noauth", t.TempDir()
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.TickMs, cfg.ElectionMs = 50, 500 // as the shared cluster's: leases of 1 s
	cfg.LogLevel, cfg.LogOutputs = "error", []string{"/dev/null"}
	cfg.EnableGRPCGateway = false
	cfg.UnsafeNoFsync = true
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		t.Fatal(err)
	case <-time.After(60 * time.Second):
		t.Fatal("the etcd member did not become ready within 60 s")
	}
	return client.Host
}

// TestConformanceWithSpareLeases runs the shared suite on a client
// without a password: released leases are kept as spares, new entries
// reuse them after a keep-alive, hand-offs keep the lease alive.
func TestConformanceWithSpareLeases(t *testing.T) {
	c := openMember(t)
	region := randomRegion()
	registrytest.Run(t, registrytest.Backend{
		NewRepository: func(t testing.TB) registry.Repository {
			return newRepo(t, c, etcdlock.WithRegion(region))
		},
		DeleteExpired: func(ctx context.Context) error {
			_, err := c.Delete(ctx, etcdlock.DefaultPrefix+region+"\x00", clientv3.WithPrefix())
			return err
		},
	})
}

// anyCount, as a step's count of an operation, checks none.
const anyCount = ^uint64(0)

// slackKeepAlives is the keep-alives that an acquisition on a spare
// sends, the spare's grant or last keep-alive sent between fresh0 and
// fresh1 and the acquisition called between acq0 and acq1: none when it
// began within the slack (a second) of the spare's freshness, one when it
// began later, anyCount when the clock readings around the two cannot
// tell (a machine so loaded that a few requests took about a second).
func slackKeepAlives(t *testing.T, fresh0, fresh1, acq0, acq1 time.Time) uint64 {
	switch {
	case acq1.Sub(fresh0) <= time.Second:
		return 0
	case acq0.Sub(fresh1) > time.Second:
		return 1
	}
	t.Logf("the acquisition began %v to %v after the spare's grant or keep-alive: its keep-alive is not counted", acq0.Sub(fresh1), acq1.Sub(fresh0))
	return anyCount
}

// requestSteps counts the requests of a repository made with m's
// provider: each call of the step it returns checks the requests, by
// operation, since the last.
func requestSteps(t *testing.T, m *telemetrytest.Metrics) func(what string, want map[string]uint64) {
	ops := []string{"grant", "acquire", "read", "revoke", "release", "keepalive"}
	count := func() map[string]uint64 {
		got := map[string]uint64{}
		for _, op := range ops {
			got[op] = m.Count(t, "lockreg.etcd.request.duration", tel.Operation.String(op), attribute.String("lockreg.outcome", "ok"))
		}
		return got
	}
	before := count()
	return func(what string, want map[string]uint64) {
		t.Helper()
		got := count()
		for _, op := range ops {
			if d := got[op] - before[op]; want[op] != anyCount && d != want[op] {
				t.Errorf("%s: %d %s requests, want %d", what, d, op, want[op])
			}
		}
		before = got
	}
}

// TestRequestsPerOperationWithSpareLeases counts the requests of a client
// without a password: a release is one transaction that keeps the lease,
// and the next entry of the same TTL takes it, once the client's
// keep-alive stream is open, instead of a grant: with the transaction
// alone while the spare, granted a second longer than the TTL, still
// covers the TTL.
func TestRequestsPerOperationWithSpareLeases(t *testing.T) {
	c := openMember(t)
	m := telemetrytest.NewMetrics()
	r := newRepo(t, c, etcdlock.WithMeterProvider(m.Provider))
	step := requestSteps(t, m)
	g0 := time.Now()
	first := mustAcquire(t, r, "k", time.Minute)
	g1 := time.Now()
	step("acquire", map[string]uint64{"grant": 1, "acquire": 1})
	if err := r.Release(ctxT(t), "k"); err != nil {
		t.Fatal(err)
	}
	step("release", map[string]uint64{"release": 1})
	if err := etcdlock.WaitKeepAliveStream(ctxT(t), r); err != nil {
		t.Fatal(err)
	}
	a0 := time.Now()
	second := mustAcquire(t, r, "k", time.Minute)
	step("acquire on the spare", map[string]uint64{"acquire": 1, "keepalive": slackKeepAlives(t, g0, g1, a0, time.Now())})
	if second.Token <= first.Token {
		t.Errorf("token %d after %d: want a greater one", second.Token, first.Token)
	}
	if err := r.Renew(ctxT(t), "k", time.Minute); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // the old lease's revocation runs in the background
	step("renew", map[string]uint64{"grant": 1, "acquire": 1, "revoke": 1})
	if err := r.Release(ctxT(t), "k"); err != nil {
		t.Fatal(err)
	}
	step("release", map[string]uint64{"release": 1})
	mustAcquire(t, r, "other-ttl", 30*time.Second)
	step("acquire with another TTL", map[string]uint64{"grant": 1, "acquire": 1})
	// A spare half-way through its TTL as granted is not reused: a lease
	// for 1 s, granted 2 s, released, then aged 1.1 s.
	mustAcquire(t, r, "short", time.Second)
	if err := r.Release(ctxT(t), "short"); err != nil {
		t.Fatal(err)
	}
	step("release", map[string]uint64{"grant": 1, "acquire": 1, "release": 1})
	etcdlock.AgeSpares(r, 1100*time.Millisecond)
	mustAcquire(t, r, "short", time.Second)
	time.Sleep(100 * time.Millisecond) // the aged spare is revoked in the background
	step("acquire after the spare aged", map[string]uint64{"grant": 1, "acquire": 1, "revoke": 1})
}

// TestAcquisitionOnAFreshSpareSendsNoKeepAlive: a lease is granted for
// the TTL rounded up to a second plus a second, so a spare released and
// reused within that second still lasts the TTL from the acquisition,
// and the acquisition is its transaction alone, with no keep-alive.
func TestAcquisitionOnAFreshSpareSendsNoKeepAlive(t *testing.T) {
	c := openMember(t)
	m := telemetrytest.NewMetrics()
	region := randomRegion()
	r := newRepo(t, c, etcdlock.WithRegion(region), etcdlock.WithMeterProvider(m.Provider))
	if err := etcdlock.WaitKeepAliveStream(ctxT(t), r); err != nil {
		t.Fatal(err)
	}
	step := requestSteps(t, m)
	g0 := time.Now()
	first := mustAcquire(t, r, "k", time.Minute)
	g1 := time.Now()
	step("acquire", map[string]uint64{"grant": 1, "acquire": 1})
	lease := entryLease(t, c, region, "k")
	last := first
	for i := range 3 {
		if err := r.Release(ctxT(t), "k"); err != nil {
			t.Fatal(err)
		}
		a0 := time.Now()
		l := mustAcquire(t, r, "k", time.Minute)
		step(fmt.Sprintf("release and acquire on the fresh spare, %d", i),
			map[string]uint64{"release": 1, "acquire": 1, "keepalive": slackKeepAlives(t, g0, g1, a0, time.Now())})
		if l.Token <= last.Token {
			t.Errorf("token %d after %d: want a greater one", l.Token, last.Token)
		}
		if got := entryLease(t, c, region, "k"); got != lease {
			t.Errorf("the entry is on lease %x, want the spare %x", got, lease)
		}
		last = l
	}
	ttl, err := c.TimeToLive(ctxT(t), lease)
	if err != nil {
		t.Fatal(err)
	}
	if ttl.GrantedTTL != 61 {
		t.Errorf("a lease for 1 min was granted %d s, want 61 (a second of slack)", ttl.GrantedTTL)
	}
	if err := r.Release(ctxT(t), "k"); err != nil {
		t.Fatal(err)
	}
}

// TestSpareTooOldToCoverTheTTLGetsItsKeepAlive: a spare whose grant or
// last keep-alive was sent over a second before the acquisition no
// longer lasts the TTL from it as far as the repository knows, so the
// acquisition sends its keep-alive beside the transaction; the spare is
// then fresh again, and a reuse within the second sends none.
func TestSpareTooOldToCoverTheTTLGetsItsKeepAlive(t *testing.T) {
	c := openMember(t)
	m := telemetrytest.NewMetrics()
	region := randomRegion()
	r := newRepo(t, c, etcdlock.WithRegion(region), etcdlock.WithMeterProvider(m.Provider))
	if err := etcdlock.WaitKeepAliveStream(ctxT(t), r); err != nil {
		t.Fatal(err)
	}
	step := requestSteps(t, m)
	mustAcquire(t, r, "k", time.Minute)
	lease := entryLease(t, c, region, "k")
	if err := r.Release(ctxT(t), "k"); err != nil {
		t.Fatal(err)
	}
	step("acquire and release", map[string]uint64{"grant": 1, "acquire": 1, "release": 1})
	// Granted 61 s for 60: from 1 s after its grant on, the spare no
	// longer covers the TTL as far as the repository knows.
	etcdlock.AgeSpares(r, 1500*time.Millisecond)
	k0 := time.Now()
	mustAcquire(t, r, "k", time.Minute)
	k1 := time.Now()
	step("acquire on the aged spare", map[string]uint64{"keepalive": 1, "acquire": 1})
	if got := entryLease(t, c, region, "k"); got != lease {
		t.Errorf("the entry is on lease %x, want the spare %x", got, lease)
	}
	if err := r.Release(ctxT(t), "k"); err != nil {
		t.Fatal(err)
	}
	a0 := time.Now()
	mustAcquire(t, r, "k", time.Minute)
	step("release and acquire on the spare just kept alive",
		map[string]uint64{"release": 1, "acquire": 1, "keepalive": slackKeepAlives(t, k0, k1, a0, time.Now())})
	if err := r.Release(ctxT(t), "k"); err != nil {
		t.Fatal(err)
	}
}

package etcdlock_test

import (
	"context"
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

// TestRequestsPerOperationWithSpareLeases counts the requests of a client
// without a password: a release is one transaction that keeps the lease,
// and the next entry of the same TTL takes it with a keep-alive, once the
// client's keep-alive stream is open, instead of a grant.
func TestRequestsPerOperationWithSpareLeases(t *testing.T) {
	c := openMember(t)
	m := telemetrytest.NewMetrics()
	r := newRepo(t, c, etcdlock.WithMeterProvider(m.Provider))
	ops := []string{"grant", "acquire", "read", "revoke", "release", "keepalive"}
	count := func() map[string]uint64 {
		got := map[string]uint64{}
		for _, op := range ops {
			got[op] = m.Count(t, "lockreg.etcd.request.duration", tel.Operation.String(op), attribute.String("lockreg.outcome", "ok"))
		}
		return got
	}
	before := count()
	step := func(what string, want map[string]uint64) {
		t.Helper()
		got := count()
		for _, op := range ops {
			if d := got[op] - before[op]; d != want[op] {
				t.Errorf("%s: %d %s requests, want %d", what, d, op, want[op])
			}
		}
		before = got
	}
	first := mustAcquire(t, r, "k", time.Minute)
	step("acquire", map[string]uint64{"grant": 1, "acquire": 1})
	if err := r.Release(ctxT(t), "k"); err != nil {
		t.Fatal(err)
	}
	step("release", map[string]uint64{"release": 1})
	if err := etcdlock.WaitKeepAliveStream(ctxT(t), r); err != nil {
		t.Fatal(err)
	}
	second := mustAcquire(t, r, "k", time.Minute)
	step("acquire on the spare", map[string]uint64{"keepalive": 1, "acquire": 1})
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
	// A spare half-way through its TTL is not reused: a 1 s lease, released,
	// then left 0.6 s.
	mustAcquire(t, r, "short", time.Second)
	if err := r.Release(ctxT(t), "short"); err != nil {
		t.Fatal(err)
	}
	step("release", map[string]uint64{"grant": 1, "acquire": 1, "release": 1})
	time.Sleep(600 * time.Millisecond)
	mustAcquire(t, r, "short", time.Second)
	time.Sleep(100 * time.Millisecond) // the aged spare is revoked in the background
	step("acquire after the spare aged", map[string]uint64{"grant": 1, "acquire": 1, "revoke": 1})
}

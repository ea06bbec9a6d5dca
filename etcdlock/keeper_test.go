package etcdlock_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/attribute"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/lockreg/lockreg/etcdlock"
	tel "github.com/lockreg/lockreg/internal/telemetry"
	"github.com/lockreg/lockreg/internal/telemetry/telemetrytest"
)

// requests counts a repository's requests of one operation that
// succeeded.
func requests(t *testing.T, m *telemetrytest.Metrics, op string) uint64 {
	t.Helper()
	return m.Count(t, "lockreg.etcd.request.duration", tel.Operation.String(op), attribute.String("lockreg.outcome", "ok"))
}

// cycle acquires key and releases it.
func cycle(t *testing.T, r *etcdlock.Repository, key string, ttl time.Duration) {
	t.Helper()
	mustAcquire(t, r, key, ttl)
	if err := r.Release(ctxT(t), key); err != nil {
		t.Fatal(err)
	}
}

// The keep-alives of the acquisitions on spare leases all go over one
// lasting stream, not one stream each (KeepAliveOnce's). The spare is
// aged before each acquisition, past the second within which it would
// need no keep-alive.
func TestKeepAlivesShareOneStream(t *testing.T) {
	var streams atomic.Int64
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{startMember(t)}, DialTimeout: 15 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainStreamInterceptor(
			func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
				if method == "/etcdserverpb.Lease/LeaseKeepAlive" {
					streams.Add(1)
				}
				return streamer(ctx, desc, cc, method, opts...)
			})}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	m := telemetrytest.NewMetrics()
	r := newRepo(t, c, etcdlock.WithMeterProvider(m.Provider))
	cycle(t, r, "k", time.Minute)
	if err := etcdlock.WaitKeepAliveStream(ctxT(t), r); err != nil {
		t.Fatal(err)
	}
	const n = 20
	for range n {
		etcdlock.AgeSpares(r, 1500*time.Millisecond)
		cycle(t, r, "k", time.Minute)
	}
	if got := requests(t, m, "keepalive"); got != n {
		t.Errorf("%d keep-alives for %d acquisitions on a spare, want %d", got, n, n)
	}
	if got := streams.Load(); got != 1 {
		t.Errorf("%d keep-alive streams opened, want 1", got)
	}
}

// A client that logs in with a user name and password starts no keeper,
// whose stream would log in each time it is opened.
func TestPasswordClientStartsNoKeeper(t *testing.T) {
	c := sharedClient(t)
	r := newRepo(t, c)
	cycle(t, r, "k", time.Minute)
	cycle(t, r, "k", time.Minute)
	if etcdlock.KeeperRunning(c) {
		t.Fatal("a client with a password has a keeper")
	}
}

// A keep-alive stream that fails is opened again, and acquisitions go on
// meanwhile, with new grants.
func TestKeepAliveStreamReopensAfterFailure(t *testing.T) {
	m := telemetrytest.NewMetrics()
	r := newRepo(t, openMember(t), etcdlock.WithMeterProvider(m.Provider))
	cycle(t, r, "k", time.Minute)
	if err := etcdlock.WaitKeepAliveStream(ctxT(t), r); err != nil {
		t.Fatal(err)
	}
	broken := etcdlock.BreakKeepAliveStream(r)
	for etcdlock.KeepAliveStream(r) == broken {
		time.Sleep(time.Millisecond) // the stream's reader sees it end
	}
	cycle(t, r, "k", time.Minute) // no stream yet: a grant
	if err := etcdlock.WaitKeepAliveStream(ctxT(t), r); err != nil {
		t.Fatal(err)
	}
	if etcdlock.KeepAliveStream(r) == broken {
		t.Fatal("the broken stream is still in use")
	}
	before := requests(t, m, "keepalive")
	etcdlock.AgeSpares(r, 1500*time.Millisecond) // past the second within which it needs none
	cycle(t, r, "k", time.Minute)
	if got := requests(t, m, "keepalive") - before; got != 1 {
		t.Errorf("%d keep-alives on the new stream, want 1", got)
	}
}

// The repositories of one client share its keeper, which the Close of the
// last of them stops.
func TestCloseOfTheLastRepositoryStopsTheKeeper(t *testing.T) {
	c := openMember(t)
	var repos []*etcdlock.Repository
	for range 2 {
		r, err := etcdlock.New(c, etcdlock.WithRegion(randomRegion()))
		if err != nil {
			t.Fatal(err)
		}
		repos = append(repos, r)
		cycle(t, r, "k", time.Minute)
		if err := etcdlock.WaitKeepAliveStream(ctxT(t), r); err != nil {
			t.Fatal(err)
		}
	}
	if etcdlock.KeepAliveStream(repos[0]) != etcdlock.KeepAliveStream(repos[1]) {
		t.Error("two repositories of one client have streams of their own")
	}
	if err := repos[0].Close(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if !etcdlock.KeeperRunning(c) {
		t.Fatal("the keeper stopped while a repository of its client was open")
	}
	if err := repos[1].Close(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if etcdlock.KeeperRunning(c) {
		t.Fatal("the keeper runs after the last repository of its client closed")
	}
}

package etcdlock_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lockreg/lockreg/etcdlock"
)

// A Release that fails (here every request fails while it runs, as when
// the cluster elects a new leader) leaves the holder's entry behind. The
// same client's next acquisition must not take that entry back, ahead of
// the waiter queued behind it and with the same token (fenced storage
// refuses a token it has seen): it finishes the release, so the waiter
// gets the key, with a greater token, and queues behind it. (Found by the
// chaos tests' leader kill: a release timed out during the election, and
// the next hold of the same process had the same token.)
func TestAnAcquisitionAfterAFailedReleaseQueuesAnew(t *testing.T) {
	cl := sharedCluster(t)
	var failing atomic.Bool
	cfg := clientConfig(cl.endpoints(), "root", rootPassword)
	cfg.DialOptions = append(cfg.DialOptions, grpc.WithChainUnaryInterceptor(
		func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			if failing.Load() {
				return status.Error(codes.Unavailable, "injected: no member answers")
			}
			return invoker(ctx, method, req, reply, cc, opts...)
		}))
	cli, err := clientv3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	region := randomRegion()
	a := newRepo(t, cli, etcdlock.WithRegion(region), etcdlock.WithClientID("a"))
	b := newRepo(t, sharedClient(t), etcdlock.WithRegion(region), etcdlock.WithClientID("b"))
	const ttl = 10 * time.Second
	first := mustAcquire(t, a, "k", ttl)
	if _, ok, err := b.AcquireOrWait(ctxT(t), "k", ttl); ok || err != nil {
		t.Fatalf("the waiter's AcquireOrWait = %v, %v, want queued", ok, err)
	}

	failing.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	err = a.Release(ctx, "k")
	cancel()
	failing.Store(false)
	if err == nil {
		t.Fatal("Release succeeded although every request failed")
	}

	lease, ok, err := a.AcquireOrWait(ctxT(t), "k", ttl)
	if err != nil {
		t.Fatal(err)
	}
	if ok {
		t.Fatalf("after its failed release the holder took the key again (token %d, was %d), ahead of the waiter", lease.Token, first.Token)
	}
	next, ok, err := b.HandedLease(ctxT(t), "k")
	if err != nil || !ok {
		t.Fatalf("the waiter's HandedLease = %v, %v, want the key handed to it", ok, err)
	}
	if next.Token <= first.Token {
		t.Fatalf("the waiter's token %d is not greater than %d", next.Token, first.Token)
	}
	if err := b.Release(ctxT(t), "k"); err != nil {
		t.Fatal(err)
	}
	again, ok, err := a.HandedLease(ctxT(t), "k")
	if err != nil || !ok {
		t.Fatalf("the first client's HandedLease after the waiter's release = %v, %v", ok, err)
	}
	if again.Token <= next.Token {
		t.Fatalf("token %d after the waiter's %d", again.Token, next.Token)
	}
	if err := a.Release(ctxT(t), "k"); err != nil {
		t.Fatal(err)
	}
}

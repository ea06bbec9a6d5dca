package etcdlock_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/lockreg/lockreg/etcdlock"
)

// A release while a renewal is in flight: the renewal's transaction has
// moved the entry to a new lease, its reply not yet back, when Release is
// called. The release must still free the lock: the entry is gone when it
// returns, another client takes the key, and this client's next
// acquisition has a greater token. The client logs in with a password, so
// that its Release revokes the entry's lease (revokeRelease), where the
// race was. (Found by the chaos tests' leader kill,
// where a renewal slowed by the election met a release: Release revoked
// the old lease, which no key used any more, and returned nil, leaving
// the entry on the new one; the next acquisition of the same client took
// the same entry again, with the same token.)
func TestAReleaseDuringARenewalFreesTheLock(t *testing.T) {
	cl := sharedCluster(t)
	var armed atomic.Bool
	moved, proceed := make(chan struct{}), make(chan struct{})
	cfg := clientConfig(cl.endpoints(), "root", rootPassword)
	cfg.DialOptions = append(cfg.DialOptions, grpc.WithChainUnaryInterceptor(
		func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			err := invoker(ctx, method, req, reply, cc, opts...)
			if method == "/etcdserverpb.KV/Txn" && armed.CompareAndSwap(true, false) {
				close(moved) // the transaction is done in the cluster: hold its reply back
				<-proceed
			}
			return err
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

	armed.Store(true)
	renewed := make(chan error, 1)
	go func() { renewed <- a.Renew(context.Background(), "k", ttl) }()
	select {
	case <-moved:
	case <-time.After(30 * time.Second):
		close(proceed)
		t.Fatal("the renewal sent no transaction")
	}
	released := make(chan error, 1)
	go func() { released <- a.Release(context.Background(), "k") }()
	var rerr error
	select {
	case rerr = <-released: // a release that does not wait for the renewal
		close(proceed)
	case <-time.After(time.Second): // one that does
		close(proceed)
		rerr = <-released
	}
	<-renewed // whichever way: the release came during it
	if rerr != nil {
		t.Fatalf("Release during a renewal: %v", rerr)
	}
	resp, err := sharedClient(t).Get(ctxT(t), etcdlock.DefaultPrefix+region+"\x00", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 0 {
		t.Fatalf("after the release, the lock's directory still has %d entries (lease %x): the lock is still held", len(resp.Kvs), resp.Kvs[0].Lease)
	}
	other := mustAcquire(t, b, "k", ttl)
	if other.Token <= first.Token {
		t.Fatalf("the other client's token %d is not greater than %d", other.Token, first.Token)
	}
	if err := b.Release(ctxT(t), "k"); err != nil {
		t.Fatal(err)
	}
	again := mustAcquire(t, a, "k", ttl)
	if again.Token <= other.Token {
		t.Fatalf("the next acquisition's token %d is not greater than %d", again.Token, other.Token)
	}
	if err := a.Release(ctxT(t), "k"); err != nil {
		t.Fatal(err)
	}
}

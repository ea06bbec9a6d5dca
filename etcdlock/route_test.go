package etcdlock_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"

	"github.com/lockreg/lockreg/registry"
)

// txnPeers records the member address that each transaction went to.
type txnPeers struct {
	mu    sync.Mutex
	addrs []string
}

func (p *txnPeers) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	var pr peer.Peer
	err := invoker(ctx, method, req, reply, cc, append(opts, grpc.Peer(&pr))...)
	if strings.HasSuffix(method, "/Txn") && pr.Addr != nil {
		p.mu.Lock()
		p.addrs = append(p.addrs, pr.Addr.String())
		p.mu.Unlock()
	}
	return err
}

// take empties the record and returns it.
func (p *txnPeers) take() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	a := p.addrs
	p.addrs = nil
	return a
}

// leaderOf returns the endpoint of eps whose member is the leader.
func leaderOf(t *testing.T, c *clientv3.Client, eps []string) int {
	t.Helper()
	ctx := ctxT(t)
	for {
		for i, ep := range eps {
			sctx, cancel := context.WithTimeout(ctx, time.Second)
			st, err := c.Status(sctx, ep)
			cancel()
			if err == nil && st.Leader != 0 && st.Leader == st.Header.MemberId {
				return i
			}
		}
		if ctx.Err() != nil {
			t.Fatal("no member is the leader")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A client with several endpoints and no password sends its transactions
// to the leader once its keeper has found it (route.go); with the leader
// stopped, locks keep working through the other members, and the
// transactions then go to the new leader.
func TestTransactionsGoToTheLeader(t *testing.T) {
	cl := startCluster(t, 3)
	eps := cl.endpoints()
	// A token (the cluster signs JWTs) rather than a password: the
	// client keeps a keeper (Repository.keepAlives).
	auth, err := cl.newClient(t).Authenticate(ctxT(t), "root", rootPassword)
	if err != nil {
		t.Fatal(err)
	}
	var peers txnPeers
	cfg := clientConfig(eps, "", "")
	cfg.Token = auth.Token
	cfg.DialOptions = []grpc.DialOption{grpc.WithChainUnaryInterceptor(peers.intercept)}
	c, err := clientv3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	repo := newRepo(t, c)
	locks, err := registry.New(repo, registry.WithTTL(5*time.Second), registry.WithErrorHandler(func(string, error) {}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { locks.Close(context.Background()) })
	l := locks.Obtain("routed")
	cycle := func() {
		t.Helper()
		if err := l.LockContext(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		if err := l.UnlockContext(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	}
	// all cycles until both transactions of one went to want, then
	// reports where the transactions of ten more cycles went.
	onLeader := func(want string) {
		t.Helper()
		ctx := ctxT(t)
		for {
			peers.take()
			cycle()
			if a := peers.take(); len(a) == 2 && a[0] == want && a[1] == want {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("the transactions never went to the leader %s", want)
			}
			time.Sleep(20 * time.Millisecond) // the keeper looks the leader up in the background
		}
		for range 10 {
			cycle()
		}
		for _, a := range peers.take() {
			if a != want {
				t.Fatalf("a transaction went to %s, not to the leader %s", a, want)
			}
		}
	}
	host := func(ep string) string { return strings.TrimPrefix(ep, "http://") }
	lead := leaderOf(t, c, eps)
	onLeader(host(eps[lead]))
	cl.stop(lead)
	cycle() // through another member, or the new leader's route
	rest := append(append([]string(nil), eps[:lead]...), eps[lead+1:]...)
	onLeader(host(rest[leaderOf(t, c, rest)]))
	cl.restart(t, lead)
}

package etcdlock

import (
	"context"
	"errors"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
)

// Transactions go to the leader. etcd's client spreads its requests over
// all its endpoints (round robin), and a write that reaches a follower
// costs the cluster more than the same write sent to the leader: the
// follower forwards it to the leader as a proposal, over the members'
// peer connection, then waits until it has learned of the commit and
// applied the entry itself before it answers. So the keeper of a client
// that has more than one endpoint (keeper.go) also finds which of them is
// the leader (a Status call to each, bounded by routeLookup) and dials it
// alone (Client.Dial: the client's credentials, token and dial options),
// and the repositories of the client send their transactions over that
// connection while it serves. It is about speed only: the leader orders
// every write whichever member receives it.
//
// A route is given up, and the leader looked up again routeRetry later,
// when its connection is down, when a transaction over it fails other
// than for a lease it names that the cluster no longer has or for the
// caller's cancellation, or when one answers from another member or in a
// later Raft term (an election since). A transaction on it does not wait
// for the connection to come up (the client's own calls do): it fails,
// and the registry's retry goes through the client. Until a new route is found, transactions
// go through the client's own balancer, as they do for a client with one
// endpoint, with a user name and password (which keeps no keeper) or
// whose endpoints name no leader (a proxy, say). A route given up is
// closed once the transactions under way on it have ended.
type route struct {
	kv     clientv3.KV
	conn   *grpc.ClientConn
	member uint64 // the leader's member ID
	term   uint64 // the Raft term in which it was found the leader
	// users counts the transactions under way on it; stale: it was given
	// up, and is closed when users drops to 0. Guarded by the keeper's mu.
	users int
	stale bool
}

const (
	// routeLookup bounds the Status call to each endpoint.
	routeLookup = time.Second
	// routeRetry is how long a keeper waits before it looks the leader
	// up again after a lookup failed or a route was given up.
	routeRetry = 500 * time.Millisecond
)

// useRoute returns the route to the leader and counts a transaction on
// it, or returns nil while none is known.
func (k *keeper) useRoute() *route {
	k.mu.Lock()
	defer k.mu.Unlock()
	rt := k.lead
	switch {
	case rt == nil:
	case rt.conn.GetState() == connectivity.TransientFailure: // the leader went away
		k.giveUp(rt)
		return nil
	default:
		rt.users++
	}
	return rt
}

// giveUp gives rt up and asks for a new route. k.mu must be held.
func (k *keeper) giveUp(rt *route) {
	if !rt.stale {
		rt.stale = true
		if k.lead == rt {
			k.lead = nil
		}
		select {
		case k.relook <- struct{}{}:
		default:
		}
	}
	if rt.users == 0 {
		rt.conn.Close()
	}
}

// doneRoute ends a transaction on rt that useRoute counted, whose answer
// had header hdr (nil if none) and error err; giveUp makes it give rt up
// whatever the answer.
func (k *keeper) doneRoute(rt *route, hdr *pb.ResponseHeader, giveUp bool) {
	if hdr != nil && (hdr.MemberId != rt.member || hdr.RaftTerm != rt.term) {
		giveUp = true
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	rt.users--
	if giveUp || rt.stale {
		k.giveUp(rt)
	}
}

// routeLoop keeps a route to the leader until ctx ends.
func (k *keeper) routeLoop(ctx context.Context) {
	defer func() {
		k.mu.Lock()
		defer k.mu.Unlock()
		if rt := k.lead; rt != nil {
			k.giveUp(rt)
		}
	}()
	if len(k.c.Endpoints()) < 2 {
		return // the client's connection goes to its one endpoint already
	}
	for ctx.Err() == nil {
		if rt := k.findLeader(ctx); rt != nil {
			k.mu.Lock()
			k.lead = rt
			k.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-k.relook:
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(routeRetry):
		}
	}
}

// findLeader dials the endpoint whose member is the leader by its own
// Status, or returns nil if no endpoint says so.
func (k *keeper) findLeader(ctx context.Context) *route {
	for _, ep := range k.c.Endpoints() {
		sctx, cancel := context.WithTimeout(ctx, routeLookup)
		st, err := k.c.Status(sctx, ep)
		cancel()
		if err != nil || st.Header == nil || st.Leader == 0 || st.Header.MemberId != st.Leader {
			continue
		}
		conn, err := k.c.Dial(ep)
		if err != nil {
			return nil
		}
		// Without the client's call options: those wait for a connection
		// that is down (WaitForReady), where a transaction on the route
		// should fail at once and the next go through the client.
		return &route{kv: clientv3.NewKVFromKVClient(pb.NewKVClient(conn), nil), conn: conn,
			member: st.Leader, term: st.Header.RaftTerm}
	}
	return nil
}

// txn commits the transaction that build makes of a new one: over the
// route to the leader if the client's keeper knows one, else through the
// client.
func (r *Repository) txn(ctx context.Context, build func(clientv3.Txn) clientv3.Txn) (*clientv3.TxnResponse, error) {
	r.mu.Lock()
	k := r.ka
	r.mu.Unlock()
	var rt *route
	if k != nil {
		rt = k.useRoute()
	}
	if rt == nil {
		return build(r.c.Txn(ctx)).Commit()
	}
	resp, err := build(rt.kv.Txn(ctx)).Commit()
	var hdr *pb.ResponseHeader
	if resp != nil {
		hdr = resp.Header
	}
	// A cancellation by the caller says nothing of the route, a lease
	// the cluster no longer has neither; a deadline passed may be the
	// leader's silence.
	k.doneRoute(rt, hdr, err != nil && !errors.Is(ctx.Err(), context.Canceled) && !errors.Is(err, rpctypes.ErrLeaseNotFound))
	return resp, err
}

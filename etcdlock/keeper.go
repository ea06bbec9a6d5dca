package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A keeper sends the keep-alives of every repository on one etcd client
// over one lasting LeaseKeepAlive stream, its requests matched to their
// answers by lease ID. clientv3's KeepAliveOnce opens a stream per call:
// a stream set-up per keep-alive on the client and on the member and, for
// a client with a user name and password, an Authenticate (a bcrypt check
// on the server) per stream, since the client's stream interceptor logs in
// again for each. clientv3's own lasting stream (Lease.KeepAlive) sends
// only every half second, for the leases that are a third through their
// TTL: no use for a keep-alive that an acquisition waits for.
//
// The stream is opened in the background, by the first repository that
// asks for it, and opened again half a second after it fails; until it is
// open, the repositories take the paths without keep-alives (a grant, a
// move to a new lease), so that no call waits for a log-in. It is shared
// by the repositories of one client, counted, and stopped by the Close of
// the last of them.
type keeper struct {
	c    *clientv3.Client
	refs int // repositories using it; guarded by keepersMu
	stop context.CancelFunc
	done chan struct{} // closed when its goroutine has ended

	mu  sync.Mutex
	cur *kaStream // the open stream; nil while none is
	// lead is the route to the leader (route.go); nil while none is
	// known. relook asks for a new one.
	lead   *route
	relook chan struct{}
}

// kaStream is one LeaseKeepAlive stream and the keep-alives waiting on it.
type kaStream struct {
	k      *keeper
	sendMu sync.Mutex // orders Send calls, and the waiters with them
	st     pb.Lease_LeaseKeepAliveClient
	cancel context.CancelFunc // ends st
	// waiting holds, per lease ID, a channel per request sent and not yet
	// answered, in the order sent: the member answers the requests of a
	// stream one after the other, in order. Guarded by the keeper's mu;
	// nil once the stream failed.
	waiting map[int64][]chan kaAnswer
	err     error // why it failed; guarded by the keeper's mu
}

type kaAnswer struct {
	ttl int64
	err error
}

// kaStall is how long a keep-alive waits for its answer before its stream
// is ended: a member answers one in a millisecond or so.
const kaStall = time.Second

// keeperRetry is how long a keeper waits before it opens a stream again.
const keeperRetry = 500 * time.Millisecond

var (
	keepersMu sync.Mutex
	keepers   = map[*clientv3.Client]*keeper{}
)

// useKeeper returns c's keeper, starting it if none runs, and counts a
// user; dropKeeper gives the use up.
func useKeeper(c *clientv3.Client) *keeper {
	keepersMu.Lock()
	defer keepersMu.Unlock()
	k := keepers[c]
	if k == nil {
		ctx, cancel := context.WithCancel(context.Background())
		k = &keeper{c: c, stop: cancel, done: make(chan struct{}), relook: make(chan struct{}, 1)}
		keepers[c] = k
		go k.run(ctx)
	}
	k.refs++
	return k
}

// dropKeeper gives up a use of k and returns, once the last use is given
// up, a channel closed when its goroutine has ended; else nil.
func dropKeeper(k *keeper) <-chan struct{} {
	keepersMu.Lock()
	defer keepersMu.Unlock()
	if k.refs--; k.refs > 0 {
		return nil
	}
	delete(keepers, k.c)
	k.stop()
	return k.done
}

// run opens the stream and reads its answers until ctx ends, opening it
// again after a failure, and keeps a route to the leader meanwhile.
func (k *keeper) run(ctx context.Context) {
	defer close(k.done)
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { k.routeLoop(ctx) })
	lc := pb.NewLeaseClient(k.c.ActiveConnection())
	for ctx.Err() == nil {
		sctx, cancel := context.WithCancel(ctx)
		st, err := lc.LeaseKeepAlive(sctx)
		if err == nil {
			s := &kaStream{k: k, st: st, cancel: cancel, waiting: map[int64][]chan kaAnswer{}}
			k.mu.Lock()
			k.cur = s
			k.mu.Unlock()
			err = k.recv(s)
			k.fail(s, err)
		}
		cancel()
		select {
		case <-ctx.Done():
		case <-time.After(keeperRetry):
		}
	}
}

// recv hands each answer of s to the first keep-alive waiting for it, and
// returns the error that ended s.
func (k *keeper) recv(s *kaStream) error {
	for {
		resp, err := s.st.Recv()
		if err != nil {
			return err
		}
		k.mu.Lock()
		q := s.waiting[resp.ID]
		if len(q) > 0 {
			q[0] <- kaAnswer{ttl: resp.TTL}
			if len(q) == 1 {
				delete(s.waiting, resp.ID)
			} else {
				s.waiting[resp.ID] = q[1:]
			}
		}
		k.mu.Unlock()
	}
}

// errStreamEnded marks the error of a keep-alive whose stream ended
// before it was answered: transient (isTransient), since the next
// keep-alive goes over a new stream, or the call takes the path without
// one; a stream ended for a stall fails with gRPC's Canceled, which alone
// would not be.
var errStreamEnded = errors.New("the keep-alive stream ended")

// fail ends s: its waiting keep-alives get err, marked errStreamEnded.
func (k *keeper) fail(s *kaStream, err error) {
	if err == nil {
		err = errStreamEnded
	} else {
		err = fmt.Errorf("%w: %w", errStreamEnded, err)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.cur == s {
		k.cur = nil
	}
	s.err = err
	for _, q := range s.waiting {
		for _, ch := range q {
			ch <- kaAnswer{err: err}
		}
	}
	s.waiting = nil
}

// ready returns the open stream, or nil while none is.
func (k *keeper) ready() *kaStream {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.cur
}

// keepAlive sends a keep-alive of lease id on s and returns the TTL the
// member answered, 0 for a lease it no longer has. A keep-alive that ctx
// gives up on stays waiting for its answer, which is dropped, so that a
// later keep-alive of the same lease gets its own answer, not an earlier
// request's.
func (s *kaStream) keepAlive(ctx context.Context, id clientv3.LeaseID) (int64, error) {
	k := s.k
	ch := make(chan kaAnswer, 1)
	s.sendMu.Lock()
	k.mu.Lock()
	if s.waiting == nil {
		err := s.err
		k.mu.Unlock()
		s.sendMu.Unlock()
		return 0, err
	}
	s.waiting[int64(id)] = append(s.waiting[int64(id)], ch)
	k.mu.Unlock()
	// An error of Send ends the stream: its Recv fails too, and fail
	// answers ch.
	_ = s.st.Send(&pb.LeaseKeepAliveRequest{ID: int64(id)})
	s.sendMu.Unlock()
	stall := time.NewTimer(kaStall)
	defer stall.Stop()
	for {
		select {
		case a := <-ch:
			return a.ttl, a.err
		case <-stall.C:
			// The member does not answer (a member cut off from its
			// leader forwards renewals until its request timeout): end
			// the stream, which fails its keep-alives; the next goes to
			// whichever member the client's balancer picks.
			s.cancel()
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

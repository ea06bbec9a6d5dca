package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockreg/lockreg/registry"
)

// Repository is one client of the locks kept in etcd: it implements
// registry.Repository, registry.HandOffQueue and registry.Notifier with
// one etcd lease per entry, waiter keys ordered by create revision and
// watches of each waiter's predecessor, and registry.Checker and
// registry.Describer. Create it with New. It is safe for concurrent use
// and holds no mutex across a call to etcd.
//
// The repository remembers, in memory, its entries: the keys it holds,
// those it waits with, and those that a failed call may have left behind,
// so that Close revokes the latter two only.
type Repository struct {
	c     *clientv3.Client
	cfg   *config
	ears  *notifier
	bg    tracker // revocations in the background
	mu    sync.Mutex
	locks map[string]*holding // by caller's key
	// spares are leases no entry uses, by the seconds they were granted
	// for (lease.go).
	spares map[int64][]spare
	// ka is the client's keeper, its keep-alive stream (keeper.go), from
	// the first call that asked for it on; Close gives it up.
	ka *keeper
	// keepAlives: the client may keep a keep-alive stream, so entries
	// reuse spare leases and hand-offs keep their lease alive instead of
	// moving the entry (lease.go). False for a client that logs in with a
	// user name and password: etcd's client authenticates again, a bcrypt
	// check on the server, for every stream it opens, and the keeper
	// opens one each time the first repository of a client needs it.
	keepAlives bool
	// closed: Close was called; closeDone: a Close revoked every leftover.
	closed, closeDone bool
}

// holding is what the repository knows of one key.
type holding struct {
	acquiring int           // Acquire, AcquireOrWait and HandedLease calls in flight
	held      bool          // the last of them took the lease and no Release has ended it
	e         *entry        // this client's entry under the key; nil if none is known
	changed   chan struct{} // closed when e changes, for the key's watchers; nil until asked for
	watchers  int           // Notify subscriptions of the key
}

var (
	_ registry.Repository   = (*Repository)(nil)
	_ registry.HandOffQueue = (*Repository)(nil)
	_ registry.Notifier     = (*Repository)(nil)
	_ registry.Checker      = (*Repository)(nil)
)

// New returns a repository on c configured by opts. It does no I/O and
// starts no goroutine. A client whose endpoints do not answer (etcd 3.7's
// clientv3.New connects in the background and returns at once) gives a
// repository whose calls fail within their context's deadline (the
// registry bounds each by the lease's TTL) with an error that names the
// endpoints; a client whose user may not write under the prefix gets a
// permission error at its first call, which the registry does not retry;
// Check reports either to a readiness probe. clientv3.New itself refuses
// a wrong password. The repository never closes c.
//
// It returns an error wrapping ErrInvalidOption for a nil c or an invalid
// option, among them a prefix or region that could name the keys of
// another prefix and region.
func New(c *clientv3.Client, opts ...Option) (*Repository, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: New with a nil etcd client", ErrInvalidOption)
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	r := &Repository{c: c, cfg: cfg, locks: make(map[string]*holding), spares: make(map[int64][]spare),
		keepAlives: c.Token != "" || c.Username == "" || c.Password == ""}
	r.ears = newNotifier(r)
	return r, nil
}

// ClientID returns the client id that owns the leases this repository
// takes.
func (r *Repository) ClientID() string { return r.cfg.clientID }

// Acquire takes the lease on key for ttl if nobody holds it and nobody
// waits for it, or if this client holds it (then the lease is made to last
// ttl from now). It reports false with a nil error when another client
// holds it or waits for it: waiters are served first (see AcquireOrWait).
//
// A new lease costs two round trips: a lease grant, then one transaction
// that writes this client's entry only if the lock's directory is empty.
// Its fencing token is the entry's create revision. An attempt that finds
// the lock held revokes the lease it granted, in the background. Holding
// it again costs a read transaction and, unless the lease lasts ttl
// already, a grant and a transaction that move the entry to a new lease
// (see Renew). ttl must be positive; the lease lasts ttl in this process
// (see the package documentation) and at most ttl rounded up to a second,
// plus a second (or the cluster's minimum), if this process dies. It fails with an error
// wrapping registry.ErrClosed after Close, and with an error satisfying
// errors.Is(err, registry.ErrTransient) for failures that may pass on
// retry.
func (r *Repository) Acquire(ctx context.Context, key string, ttl time.Duration) (registry.Lease, bool, error) {
	return r.take(ctx, key, ttl, false)
}

// AcquireOrWait is Acquire that, when it does not take the lease, writes
// this client's entry in key's directory, or keeps it there: a place in
// the queue by create revision, as etcd's concurrency.Mutex queues. The
// entry created first holds the lock, so waiters are served in the order
// they began to wait and a client that releases and asks again at once
// queues behind them. The place lapses with its lease, which lasts ttl
// (rounded up to a second, plus a second) after the call that last
// refreshed it: a call refreshes it (a keep-alive, or a new lease as Renew
// moves to) once half of it has passed. A
// first call costs a grant and a transaction, later ones one read
// transaction.
func (r *Repository) AcquireOrWait(ctx context.Context, key string, ttl time.Duration) (registry.Lease, bool, error) {
	return r.take(ctx, key, ttl, true)
}

func (r *Repository) take(ctx context.Context, key string, ttl time.Duration, wait bool) (registry.Lease, bool, error) {
	what := opKey("acquire", key)
	if ttl <= 0 {
		return registry.Lease{}, false, fmt.Errorf("%s: ttl %v: %w", what, ttl, registry.ErrInvalidTTL)
	}
	h, e, err := r.begin(what, key)
	if err != nil {
		return registry.Lease{}, false, err
	}
	lease, ok, err := r.acquire(ctx, key, h, e, ttl, wait)
	r.end(key, h, ok, err)
	if err != nil {
		return registry.Lease{}, false, r.wrap(ctx, what, err)
	}
	return lease, ok, nil
}

func (r *Repository) acquire(ctx context.Context, key string, h *holding, e *entry, ttl time.Duration, wait bool) (registry.Lease, bool, error) {
	if err := ctx.Err(); err != nil {
		return registry.Lease{}, false, err
	}
	sent := time.Now()
	if e != nil {
		lease, ok, known, err := r.again(ctx, key, h, e, sent, ttl, wait)
		if known || err != nil {
			return lease, ok, err
		}
	}
	n := keyNames(r.cfg.ns, r.cfg.clientID, key)
	var (
		sp   spare
		resp *clientv3.TxnResponse
	)
	for {
		var err error
		// A spare whose known life covers the TTL from this call's start
		// (spare.covers: granted a second longer than the TTL, it does for
		// a second after its grant or last keep-alive) needs nothing but
		// the transaction, which fails with ErrLeaseNotFound for a lease
		// the cluster no longer has. Another spare's keep-alive goes out
		// beside the transaction, not before it: the entry counts only
		// once both have succeeded, and the keep-alive, sent after this
		// call began, then makes the lease last its TTL from then (see ka
		// below).
		var reused, alive bool
		st := r.stream()
		if st != nil {
			sp, reused = r.takeSpare(ttl)
			alive = reused && sp.covers(sent, ttl)
		}
		ka := make(chan error, 1)
		var kaGranted time.Duration
		var kaSent time.Time
		switch {
		case reused && !alive:
			go func(id clientv3.LeaseID) { // joined below, bounded by ctx
				var err error
				kaGranted, kaSent, err = r.refresh(ctx, st, id)
				ka <- err
			}(sp.id)
		case !reused:
			if sp, err = r.newLease(ctx, ttl); err != nil {
				return registry.Lease{}, false, err
			}
		}
		put := clientv3.OpPut(n.entry, r.cfg.clientID, clientv3.WithLease(sp.id))
		owner := clientv3.OpGet(n.dir, clientv3.WithFirstCreate()...)
		build := func(txn clientv3.Txn) clientv3.Txn {
			if wait { // enqueue: write the entry unless it exists
				return txn.If(clientv3.Compare(clientv3.CreateRevision(n.entry), "=", 0)).
					Then(put, owner).Else(clientv3.OpGet(n.entry), owner)
			} // take only a lock that nobody holds or waits for
			return txn.If(clientv3.Compare(clientv3.CreateRevision(n.dir), "=", 0).WithPrefix()).
				Then(put).Else(owner)
		}
		start := time.Now()
		resp, err = r.txn(ctx, build)
		r.cfg.tel.request("acquire", start, err)
		if reused && !alive {
			kaErr := <-ka
			switch {
			case kaErr == nil:
				sp.granted, sp.fresh = kaGranted, kaSent
			case errors.Is(kaErr, errLeaseLost):
				// The spare lapsed: the transaction failed for it, or wrote
				// an entry that the lease's expiry deleted.
				continue
			default: // the lease's life is unknown: revoking it deletes any entry written
				r.revokeLater(sp.id)
				if err == nil {
					err = kaErr
				}
				return registry.Lease{}, false, err
			}
		}
		if reused && errors.Is(err, rpctypes.ErrLeaseNotFound) {
			// The spare is gone (revoked behind the repository's back):
			// nothing was written; take another or grant.
			continue
		}
		if err != nil {
			r.revokeLater(sp.id) // the entry, if the transaction wrote it after all, goes with it
			return registry.Lease{}, false, err
		}
		break
	}
	id := sp.id
	fresh := &entry{n: n, lease: id, granted: sp.granted, asked: sp.asked, fresh: sp.fresh, ttl: ttl}
	var first *int64
	switch {
	case resp.Succeeded:
		fresh.rev = resp.Header.Revision
		if wait {
			first = firstRev(resp.Responses[1])
		} else {
			first = &fresh.rev
		}
	case wait: // this client's entry exists, written by a call whose reply was lost
		r.putSpare(sp)
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 {
			return registry.Lease{}, false, errors.New("the entry vanished within the transaction")
		}
		fresh.rev, fresh.lease, fresh.granted, fresh.asked = kvs[0].CreateRevision, clientv3.LeaseID(kvs[0].Lease), 0, 0
		first = firstRev(resp.Responses[1])
	default:
		r.putSpare(sp) // nothing was written with it
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 || string(kvs[0].Key) != n.entry {
			return registry.Lease{}, false, nil // held or awaited by another client
		}
		// This client's entry holds the lock: written by a call whose reply was lost.
		fresh.rev, fresh.lease, fresh.granted, fresh.asked = kvs[0].CreateRevision, clientv3.LeaseID(kvs[0].Lease), 0, 0
		first = &fresh.rev
	}
	r.setEntry(key, h, fresh)
	if first == nil || *first != fresh.rev {
		return registry.Lease{}, false, nil // queued
	}
	return r.hold(ctx, key, h, fresh, sent, ttl)
}

// again asks whether e, an entry this client knows of, holds key's lock,
// in one read transaction, and takes the lease if it does. known is false
// when the entry is gone and a new one is needed.
func (r *Repository) again(ctx context.Context, key string, h *holding, e *entry, sent time.Time, ttl time.Duration, wait bool) (lease registry.Lease, ok, known bool, err error) {
	if done, known, err := r.againAfterRelease(ctx, key, h, e); done { // leftover.go
		return registry.Lease{}, false, known, err
	}
	first, alive, err := r.first(ctx, e)
	switch {
	case err != nil:
		return registry.Lease{}, false, true, err
	case !alive:
		r.setEntry(key, h, nil)
		return registry.Lease{}, false, false, nil
	case first == e.rev:
		lease, ok, err := r.hold(ctx, key, h, e, sent, ttl)
		if errors.Is(err, errLeaseLost) {
			return registry.Lease{}, false, false, nil
		}
		return lease, ok, true, err
	}
	// Queued behind another entry: keep the place's lease alive.
	r.mu.Lock()
	e.ttl = ttl
	half := e.lasts(time.Now(), e.granted/2)
	r.mu.Unlock()
	if wait && !half {
		if err := r.ensure(ctx, e, time.Now(), ttl, false); errors.Is(err, errLeaseLost) {
			r.setEntry(key, h, nil)
			return registry.Lease{}, false, true, nil
		} else if err != nil {
			return registry.Lease{}, false, true, err
		}
	}
	return registry.Lease{}, false, true, nil
}

// first reads the create revision of the first entry of e's directory, in
// a transaction that only reads if e's key still exists (alive).
func (r *Repository) first(ctx context.Context, e *entry) (rev int64, alive bool, err error) {
	start := time.Now()
	resp, err := r.txn(ctx, func(t clientv3.Txn) clientv3.Txn {
		return t.If(clientv3.Compare(clientv3.CreateRevision(e.n.entry), "=", e.rev)).
			Then(clientv3.OpGet(e.n.dir, clientv3.WithFirstCreate()...))
	})
	r.cfg.tel.request("read", start, err)
	if err != nil || !resp.Succeeded {
		return 0, false, err
	}
	if p := firstRev(resp.Responses[0]); p != nil {
		return *p, true, nil
	}
	return 0, false, nil
}

func firstRev(op *pb.ResponseOp) *int64 {
	kvs := op.GetResponseRange().Kvs
	if len(kvs) == 0 {
		return nil
	}
	return &kvs[0].CreateRevision
}

// hold makes e, the first entry of key's directory, this client's hold
// for ttl from sent: the lease is made to last that long, and the deadline
// set.
func (r *Repository) hold(ctx context.Context, key string, h *holding, e *entry, sent time.Time, ttl time.Duration) (registry.Lease, bool, error) {
	if err := r.ensure(ctx, e, sent, ttl, false); err != nil {
		if errors.Is(err, errLeaseLost) {
			r.setEntry(key, h, nil)
		}
		return registry.Lease{}, false, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if e.gone {
		return registry.Lease{}, false, errLeaseLost
	}
	r.arm(e, sent, ttl)
	return registry.Lease{Token: e.rev}, true, nil
}

// HandedLease reports whether this client's entry has become the first of
// key's directory, because the entries before it were released or
// expired, and if so holds the lease as AcquireOrWait would and returns
// it. It is one read transaction, plus a grant and a transaction that
// move the entry to a new lease when the place's lease would not last the
// TTL it was asked for from now (the token stays the same).
func (r *Repository) HandedLease(ctx context.Context, key string) (registry.Lease, bool, error) {
	what := opKey("claim", key)
	h, e, err := r.begin(what, key)
	if err != nil {
		return registry.Lease{}, false, err
	}
	var lease registry.Lease
	var ok bool
	if e != nil {
		r.mu.Lock()
		ttl := e.ttl
		r.mu.Unlock()
		lease, ok, _, err = r.again(ctx, key, h, e, time.Now(), ttl, false)
	}
	r.end(key, h, ok, nil) // a claim that finds nothing says nothing of a lease held before
	if err != nil {
		return registry.Lease{}, false, r.wrap(ctx, what, err)
	}
	return lease, ok, nil
}

// begin counts a call on key in flight, so that a concurrent Close spares
// the key, and returns the key's holding and its entry, if any.
func (r *Repository) begin(what, key string) (*holding, *entry, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, nil, fmt.Errorf("%s: %w", what, registry.ErrClosed)
	}
	h := r.locks[key]
	if h == nil {
		h = new(holding)
		r.locks[key] = h
	}
	h.acquiring++
	if h.e != nil && h.e.gone {
		r.setEntryLocked(h, nil)
	}
	return h, h.e, nil
}

// end records the outcome of a call that begin counted. After an error a
// lease held before stays held, as its holder still relies on it.
func (r *Repository) end(key string, h *holding, acquired bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	h.acquiring--
	switch {
	case err != nil:
	case acquired:
		h.held = true
	default:
		h.held = false
	}
	r.forget(key, h)
}

// setEntry records e as this client's entry under key.
func (r *Repository) setEntry(key string, h *holding, e *entry) {
	r.mu.Lock()
	r.setEntryLocked(h, e)
	r.forget(key, h)
	r.mu.Unlock()
}

// setEntryLocked records e as h's entry and tells the key's watchers.
// r.mu must be held.
func (r *Repository) setEntryLocked(h *holding, e *entry) {
	if h.e == e {
		return
	}
	if h.e != nil && h.e != e {
		h.e.disarm()
	}
	h.e = e
	if h.changed != nil {
		close(h.changed)
		h.changed = nil
	}
}

// forget drops h once it says nothing. r.mu must be held.
func (r *Repository) forget(key string, h *holding) {
	if !h.held && h.e == nil && h.acquiring == 0 && h.watchers == 0 && r.locks[key] == h {
		delete(r.locks, key)
	}
}

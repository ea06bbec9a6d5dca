package etcdlock

import (
	"context"
	"errors"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The lease lifecycle, apart from exclusion (acquire.go), as etcd's
// concurrency.Session is apart from its Mutex. Each entry of this client
// (a hold or a place in a queue) is attached to an etcd lease of its own,
// granted for the caller's TTL rounded up to a second (etcd's unit) plus
// one second of slack (leaseSeconds; the cluster may raise it to its
// minimum, 1.5 election timeouts rounded up). The cluster deletes the
// entry when the lease expires by the leader's clock: that bounds a
// crashed or partitioned holder, at the TTL rounded up to a second plus
// one second after its last acquisition or renewal. The second of slack
// lets an entry reuse a spare lease without a keep-alive while the
// spare's known life still covers the TTL (acquire, ensure): a lease
// granted for exactly the TTL is always too short by the time it is
// reused. A hold that lives in this process also has a deadline, its TTL
// after the call that took or renewed it was sent, at which the
// repository revokes the lease itself unless renewed, so that sub-second
// and non-whole TTLs, and the slack, last what was asked for and not up
// to two seconds longer. The deadline only ever ends a hold earlier than
// the cluster would; no host ever judges another host's lease.

// entry is this client's entry under one lock and the lease it is attached
// to. Its fields are guarded by the repository's mu, but for n and rev,
// which never change.
type entry struct {
	n       names
	rev     int64            // create revision: the fencing token while it holds
	lease   clientv3.LeaseID // the lease it is attached to now
	granted time.Duration    // the lease's TTL as granted; 0 if not known
	asked   int64            // seconds(ttl) of the TTL it was granted for (leaseSeconds); 0 if not known
	// fresh is when the grant of the lease was sent: the cluster keeps it
	// until fresh+granted at least.
	fresh    time.Time
	ttl      time.Duration // the lease length the caller asked for last
	holds    bool          // it is a hold: the deadline ends it
	deadline time.Time     // a hold's end unless renewed
	timer    *time.Timer   // fires at the deadline; nil until the first hold
	gone     bool          // the deadline passed or the lease is lost: it counts for nothing
	// moving counts the calls of ensure in flight that move the entry to
	// a new lease (a grant, then a transaction); moved is closed when it
	// drops to 0. releasing: a Release waited for them and began: no move
	// starts any more, so the lease it revokes is the entry's.
	moving    int
	moved     chan struct{}
	releasing bool
}

// beginMove counts a move of e in flight. r.mu must be held.
func (e *entry) beginMove() {
	if e.moving == 0 {
		e.moved = make(chan struct{})
	}
	e.moving++
}

func (r *Repository) endMove(e *entry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e.moving--; e.moving == 0 {
		close(e.moved)
		e.moved = nil
	}
}

// settle waits until no move of e is in flight and marks e releasing, so
// that none starts: a release that revoked the old lease while a renewal
// moved the entry to a new one would leave the entry, and the lock, held
// by a lease that nobody renews or revokes (and the same client's next
// acquisition would take it back with the same token).
func (r *Repository) settle(ctx context.Context, e *entry) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for e.moving > 0 {
		moved := e.moved
		r.mu.Unlock()
		select {
		case <-moved:
		case <-ctx.Done():
			r.mu.Lock()
			return ctx.Err()
		}
		r.mu.Lock()
	}
	e.releasing = true
	return nil
}

// seconds is ttl rounded up to whole seconds, at least 1.
func seconds(ttl time.Duration) int64 {
	s := int64((ttl + time.Second - 1) / time.Second)
	return max(s, 1)
}

// slack is what a lease is granted for beyond its TTL rounded up to a
// second: for a second after its grant or keep-alive, a lease granted for
// a TTL still lasts that TTL from now, so an entry can be attached to a
// spare, or a waiter handed the lock, without a keep-alive (or, for a
// client without spares, without moving to a new lease). It is also what
// a crashed or partitioned holder keeps the lock beyond that: the
// in-process deadline, at the TTL itself, ends a live hold.
const slack = 1

// leaseSeconds is what a lease for ttl is granted for: seconds(ttl) plus
// the slack.
func leaseSeconds(ttl time.Duration) int64 { return seconds(ttl) + slack }

// grant grants a lease for ttl (leaseSeconds) and returns it with its TTL
// as granted and when the grant was sent.
func (r *Repository) grant(ctx context.Context, ttl time.Duration) (clientv3.LeaseID, time.Duration, time.Time, error) {
	sent := time.Now()
	resp, err := r.c.Grant(ctx, leaseSeconds(ttl))
	r.cfg.tel.request("grant", sent, err)
	if err != nil {
		return 0, 0, sent, err
	}
	return resp.ID, time.Duration(resp.TTL) * time.Second, sent, nil
}

// A spare is a lease of this client that no entry uses any more: the
// lease of a released hold, or one granted for an attempt that found the
// lock held. The repository keeps a few per TTL and, while the client's
// keep-alive stream is open (keeper.go), attaches the next new entry of
// the same TTL to one rather than granting a lease: with no request of
// its own while the spare's known life covers the TTL from the
// acquisition (covers; for about a second after its grant or last
// keep-alive, the slack), else after a keep-alive, which is answered by
// the leader without a Raft write, where a grant is one. A spare has no
// key, so a process that dies with spares leaves nothing that holds or
// waits; they lapse with their TTL.
type spare struct {
	id      clientv3.LeaseID
	asked   int64         // seconds(ttl) of the TTL it was granted for (leaseSeconds)
	granted time.Duration // its TTL as granted
	fresh   time.Time     // when its grant or last keep-alive was sent
}

// covers reports whether the cluster keeps s until from+d at least, as
// far as the repository knows: its grant or last keep-alive was sent at
// fresh, so the leader received it later and expires it granted after
// that, and a new leader only ever extends a lease (it restarts every
// lease's TTL, plus an election timeout, when it takes over). That is the
// knowledge every path of the repository relies on (a grant, a
// keep-alive), so no margin is added here: the rates of the hosts' clocks
// differ by far less than the fifth of the TTL by which Done closes
// before the deadline.
func (s spare) covers(from time.Time, d time.Duration) bool {
	return s.granted > 0 && !s.fresh.Add(s.granted).Before(from.Add(d))
}

// maxSpares bounds the spares kept per TTL; more are revoked.
const maxSpares = 64

// putSpare keeps s for a later entry, or revokes it in the background
// when the client keeps no keep-alive stream (Repository.keepAlives),
// the repository is closed, the pool is full or s is half-way
// through its TTL as granted (the TTL plus the slack): a spare kept has
// half of that left at least, far more than a keep-alive takes to reach
// the leader, so that reusing it seldom costs a keep-alive that finds it
// lapsed. With the slack, a spare of 1 s is then always reused without a
// keep-alive, one of 10 s (granted 11 s) without one for its first second
// after its grant or last keep-alive and with one until 5.5 s.
func (r *Repository) putSpare(s spare) {
	r.mu.Lock()
	if r.keepAlives && !r.closed && s.asked > 0 && s.granted > 0 && time.Since(s.fresh) < s.granted/2 && len(r.spares[s.asked]) < maxSpares {
		r.spares[s.asked] = append(r.spares[s.asked], s)
		r.mu.Unlock()
		return
	}
	r.mu.Unlock()
	r.revokeLater(s.id)
}

// takeSpare takes a spare granted for ttl's seconds, the freshest first;
// those half-way through their TTL are revoked.
func (r *Repository) takeSpare(ttl time.Duration) (spare, bool) {
	asked := seconds(ttl)
	r.mu.Lock()
	defer r.mu.Unlock()
	for list := r.spares[asked]; len(list) > 0; list = r.spares[asked] {
		s := list[len(list)-1]
		r.spares[asked] = list[:len(list)-1]
		if time.Since(s.fresh) < s.granted/2 {
			return s, true
		}
		r.revokeLater(s.id)
	}
	return spare{}, false
}

// takeSpares empties the pool, for Close.
func (r *Repository) takeSpares() []spare {
	r.mu.Lock()
	defer r.mu.Unlock()
	var all []spare
	for _, list := range r.spares {
		all = append(all, list...)
	}
	clear(r.spares)
	return all
}

// stream returns the client's open keep-alive stream, or nil while none
// is open, after Close and for a client that keeps none
// (Repository.keepAlives). The first call starts the client's keeper.
func (r *Repository) stream() *kaStream {
	if !r.keepAlives {
		return nil
	}
	r.mu.Lock()
	if r.ka == nil && !r.closed {
		r.ka = useKeeper(r.c)
	}
	k := r.ka
	r.mu.Unlock()
	if k == nil {
		return nil
	}
	return k.ready()
}

// refresh resets lease to its granted TTL with a keep-alive on s and
// returns that TTL and when the keep-alive was sent: the cluster keeps the
// lease until then plus the TTL at least. It returns errLeaseLost when the
// cluster no longer has the lease: a keep-alive never revives an expired
// lease.
func (r *Repository) refresh(ctx context.Context, s *kaStream, id clientv3.LeaseID) (time.Duration, time.Time, error) {
	sent := time.Now()
	ttl, err := s.keepAlive(ctx, id)
	r.cfg.tel.request("keepalive", sent, err)
	switch {
	case err != nil:
		return 0, sent, err
	case ttl <= 0:
		return 0, sent, errLeaseLost
	}
	return time.Duration(ttl) * time.Second, sent, nil
}

// newLease grants a lease for a new entry of ttl (leaseSeconds).
func (r *Repository) newLease(ctx context.Context, ttl time.Duration) (spare, error) {
	id, g, sent, err := r.grant(ctx, ttl)
	if err != nil {
		return spare{}, err
	}
	return spare{id: id, asked: seconds(ttl), granted: g, fresh: sent}, nil
}

// lasts reports, with r.mu held, whether the cluster keeps e's lease
// until from+d at least, as far as the repository knows.
func (e *entry) lasts(from time.Time, d time.Duration) bool {
	return e.granted > 0 && !e.fresh.Add(e.granted).Before(from.Add(d))
}

// errLeaseLost reports a lease that the cluster no longer has.
var errLeaseLost = errors.New("the etcd lease expired or was revoked")

// ensure makes the cluster keep e's lease until from+ttl at least, from
// being at or before the moment it is called: nothing if it does already,
// else the entry moves to a new lease granted for ttl (a grant, and a
// transaction that writes the key with the new lease only if it still
// exists with e's create revision, so that a key the cluster deleted with
// an expired lease is never written again), and the old lease is revoked
// in the background. The token, e's create revision, stays the same. It
// returns an error wrapping errLeaseLost when the key is gone.
//
// A lease granted for ttl (leaseSeconds) lasts ttl from now for a second
// after its grant or last keep-alive: a waiter handed the lock within
// that second sends nothing. When the client's keep-alive stream is open
// (keeper.go), e's lease was granted for ttl (e.asked) and prove is false
// (a hand-off, a place in a queue kept), a keep-alive sent now does
// instead of a move (LeaseKeepAlive, one request that resets the lease to
// its granted TTL on the leader, without a Raft write, and fails for an
// expired lease): the lease then lasts from now as long as a new one
// would. A renewal
// (prove) always moves the entry: a keep-alive can neither lengthen a
// lease beyond the TTL it was granted for nor tell that the entry is
// still there. In the bench (etcd 3.7, three members in-process) a
// keep-alive took 0.35 ms on average, a grant 2.5 ms; the client's own
// keep-alive loop (KeepAlive) sends only every third of the TTL.
func (r *Repository) ensure(ctx context.Context, e *entry, from time.Time, ttl time.Duration, prove bool) error {
	var s *kaStream
	if !prove {
		s = r.stream()
	}
	r.mu.Lock()
	ok, gone := e.lasts(from, ttl), e.gone || e.releasing
	lease, keep := e.lease, s != nil && e.asked > 0 && e.asked == seconds(ttl)
	move := !gone && !ok && !keep
	if move {
		e.beginMove() // a Release waits for it (settle)
	}
	r.mu.Unlock()
	if move {
		defer r.endMove(e)
	}
	switch {
	case gone:
		return errLeaseLost
	case ok:
		return nil
	case keep:
		// The lease was granted for this TTL (and the slack): a
		// keep-alive, sent now, makes it last from now as long as a new
		// grant would.
		g, sent, err := r.refresh(ctx, s, lease)
		if err != nil {
			return err
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if e.gone || e.lease != lease {
			return errLeaseLost
		}
		e.granted, e.fresh = g, sent
		return nil
	}
	id, g, sent, err := r.grant(ctx, ttl)
	if err != nil {
		return err
	}
	start := time.Now()
	resp, err := r.txn(ctx, func(t clientv3.Txn) clientv3.Txn {
		return t.If(clientv3.Compare(clientv3.CreateRevision(e.n.entry), "=", e.rev)).
			Then(clientv3.OpPut(e.n.entry, r.cfg.clientID, clientv3.WithLease(id)))
	})
	r.cfg.tel.request("acquire", start, err)
	if err != nil || !resp.Succeeded {
		r.revokeLater(id) // if the put happened after all, that deletes the key: the hold is lost, safely
		if err != nil {
			return err
		}
		return errLeaseLost
	}
	r.mu.Lock()
	old := e.lease
	e.lease, e.granted, e.fresh, e.asked = id, g, sent, seconds(ttl)
	again := e.gone // the deadline passed meanwhile: its revocation missed the new lease
	r.mu.Unlock()
	r.revokeLater(old)
	if again {
		r.revokeLater(id)
		return errLeaseLost
	}
	return nil
}

// arm makes e a hold that ends at sent+ttl unless renewed. r.mu must be
// held.
func (r *Repository) arm(e *entry, sent time.Time, ttl time.Duration) {
	e.holds, e.ttl, e.deadline = true, ttl, sent.Add(ttl)
	if e.timer == nil {
		e.timer = time.AfterFunc(time.Until(e.deadline), func() { r.expire(e) })
	} else {
		e.timer.Reset(time.Until(e.deadline))
	}
}

// disarm ends e's hold without ending the entry. r.mu must be held.
func (e *entry) disarm() {
	e.holds = false
	if e.timer != nil {
		e.timer.Stop()
	}
}

// expire ends a hold whose deadline passed unrenewed: the entry counts for
// nothing from now on and its lease is revoked, which deletes the key and
// wakes the next waiter.
func (r *Repository) expire(e *entry) {
	r.mu.Lock()
	if e.gone || !e.holds {
		r.mu.Unlock()
		return
	}
	if wait := time.Until(e.deadline); wait > 0 { // renewed as the timer fired
		e.timer.Reset(wait)
		r.mu.Unlock()
		return
	}
	e.gone = true
	lease := e.lease
	r.mu.Unlock()
	r.revokeLater(lease)
}

// revokeTimeout bounds a revocation in the background: a lease that could
// not be revoked expires by the cluster's clock anyway.
const revokeTimeout = 5 * time.Second

// revokeLater revokes lease in the background, reporting failures other
// than a lease already gone to the error handler. Close waits for it; a
// revocation that a hold starts after Close ends, at the latest, when the
// client is closed (the client's context), not after its retries for
// revokeTimeout against a cluster that may be gone.
func (r *Repository) revokeLater(lease clientv3.LeaseID) {
	r.bg.add()
	go func() {
		defer r.bg.done()
		ctx, cancel := context.WithTimeout(r.c.Ctx(), revokeTimeout)
		defer cancel()
		if err := r.revoke(ctx, lease); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) && r.c.Ctx().Err() == nil {
			r.cfg.onError(r.wrap(ctx, "etcdlock: revoking a lease in the background", err))
		}
	}()
}

func (r *Repository) revoke(ctx context.Context, lease clientv3.LeaseID) error {
	start := time.Now()
	_, err := r.c.Revoke(ctx, lease)
	r.cfg.tel.request("revoke", start, err)
	return err
}

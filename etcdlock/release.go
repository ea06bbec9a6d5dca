package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockreg/lockreg/registry"
)

// Renew makes this client's unexpired lease on key last ttl from now. It
// fails with an error wrapping registry.ErrLockLost when this client
// holds no lease on key, when its deadline passed (the repository then
// revokes it) or when the cluster no longer has it: a renewal never
// revives an expired lease: the entry moves to a new lease only in a
// transaction that finds it still there with its create revision, and an
// expired lease has taken the entry with it.
//
// It costs a grant and that transaction, the old lease revoked in the
// background; the token stays the same. It keeps working after Close.
func (r *Repository) Renew(ctx context.Context, key string, ttl time.Duration) error {
	what := opKey("renew", key)
	if ttl <= 0 {
		return fmt.Errorf("%s: ttl %v: %w", what, ttl, registry.ErrInvalidTTL)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	sent := time.Now()
	r.mu.Lock()
	h := r.locks[key]
	var e *entry
	if h != nil && h.held && h.e != nil && !h.e.gone && h.e.holds && sent.Before(h.e.deadline) {
		e = h.e
		// Always a new lease: a renewal proves the entry alive to the
		// cluster, so that a holder cut off from it finds out (and its
		// registry closes Done) at its next renewal.
		e.fresh = time.Time{}
	}
	r.mu.Unlock()
	if e == nil {
		return errLost(what, "this client holds no lease on it that has not passed its deadline")
	}
	err := r.ensure(ctx, e, sent, ttl, true)
	switch {
	case errors.Is(err, errLeaseLost):
		r.lost(key, h, e)
		return errLost(what, err.Error())
	case err != nil:
		return r.wrap(ctx, what, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if e.gone || !e.holds {
		return errLost(what, "the lease passed its deadline while it was renewed")
	}
	r.arm(e, sent, ttl)
	return nil
}

// lost forgets e, which the cluster no longer has.
func (r *Repository) lost(key string, h *holding, e *entry) {
	r.mu.Lock()
	e.gone = true
	if h.e == e {
		r.setEntryLocked(h, nil)
	}
	h.held = false
	r.forget(key, h)
	r.mu.Unlock()
}

// Release gives up this client's lease on key by deleting its entry, one
// transaction that deletes it only if it still exists with its create
// revision; the next entry by create revision, if any, then holds the
// lock, and only its watcher (see Notify) is woken. The etcd lease, which
// no key uses any more, is kept for a later entry of the same TTL (a
// spare, see lease.go), or revoked in the background after Close. For a
// client that logs in with a user name and password, which keeps no
// spares, it revokes the lease instead, one round trip, which deletes the
// entry. It fails with an error wrapping registry.ErrLockLost when this client
// holds no lease on key or the lease had expired. After it returns nil or
// ErrLockLost the key no longer counts as held; after another error the
// entry is left over, and Close revokes it. It keeps working after Close.
func (r *Repository) Release(ctx context.Context, key string) error {
	what := opKey("release", key)
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	r.mu.Lock()
	h := r.locks[key]
	var e *entry
	var expired bool
	if h != nil {
		e = h.e
		h.held = false
		if e != nil {
			expired = e.gone
			e.disarm()
		}
	}
	r.mu.Unlock()
	if e == nil {
		if h != nil {
			r.mu.Lock()
			r.forget(key, h)
			r.mu.Unlock()
		}
		return errLost(what, "this client holds no lease on it")
	}
	if err := r.settle(ctx, e); err != nil { // a renewal in flight may move the entry
		return r.wrap(ctx, what, err) // e stays: the next acquisition, or Close, ends it
	}
	if !r.keepAlives {
		return r.revokeRelease(ctx, what, key, h, e, expired)
	}
	start := time.Now()
	resp, err := r.txn(ctx, func(t clientv3.Txn) clientv3.Txn {
		return t.If(clientv3.Compare(clientv3.CreateRevision(e.n.entry), "=", e.rev)).
			Then(clientv3.OpDelete(e.n.entry))
	})
	r.cfg.tel.request("release", start, err)
	if err != nil {
		return r.wrap(ctx, what, err) // e stays: Close revokes it
	}
	r.mu.Lock()
	sp := spare{id: e.lease, asked: e.asked, granted: e.granted, fresh: e.fresh}
	r.mu.Unlock()
	r.lost(key, h, e)
	switch {
	case !resp.Succeeded: // the cluster expired the lease, which took the entry
		r.revokeLater(sp.id)
		return errLost(what, "the lease had expired")
	case expired: // the deadline's revocation is under way
		return errLost(what, "the lease had passed its deadline")
	}
	r.putSpare(sp)
	return nil
}

// revokeRelease is Release for a client whose keep-alives are not cheap
// (Repository.keepAlives): it revokes the entry's lease, one round trip,
// which deletes the entry.
func (r *Repository) revokeRelease(ctx context.Context, what, key string, h *holding, e *entry, expired bool) error {
	r.mu.Lock()
	lease := e.lease // settled: no renewal moves it any more
	r.mu.Unlock()
	err := r.revoke(ctx, lease)
	if err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return r.wrap(ctx, what, err) // e stays: Close revokes it
	}
	r.lost(key, h, e)
	switch {
	case err != nil:
		return errLost(what, "the lease had expired")
	case expired:
		return errLost(what, "the lease had passed its deadline")
	}
	return nil
}

// Leave takes this client out of key's queue: it revokes the lease of
// its entry, one round trip, unless the entry holds the lease or an
// acquisition is in flight. An entry that became the first meanwhile (a
// hand-off not yet claimed) goes too, which hands the lock on.
func (r *Repository) Leave(ctx context.Context, key string) error {
	what := opKey("leave", key)
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	r.mu.Lock()
	h := r.locks[key]
	if h == nil || h.e == nil || h.held || h.acquiring > 0 {
		r.mu.Unlock()
		return nil
	}
	e := h.e
	r.mu.Unlock()
	if err := r.revoke(ctx, e.lease); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return r.wrap(ctx, what, err) // e stays: Close revokes it
	}
	r.lost(key, h, e)
	return nil
}

// Close makes later Acquire calls fail with an error wrapping
// registry.ErrClosed, stops the watches of Notify and waits for their
// goroutines, revokes the leases of the entries that neither hold nor are
// being acquired (places in queues, leftovers of failed calls), one round
// trip each, bounded by ctx and by 5 s (an entry that could not be
// revoked expires with its lease), revokes its spare leases (which no key
// uses) in the background, gives up the client's keep-alive stream
// (stopped, and waited for within ctx, when this is the last repository
// of the client that used it) and waits, within ctx, for revocations in
// the background. Held leases are kept: Renew and Release keep working on
// them. Entries of an earlier process with the same client id are not known to it:
// they expire with their leases.
//
// Once a Close has succeeded, Close returns nil without I/O; a Close that
// failed may be retried. It does not close the etcd client.
func (r *Repository) Close(ctx context.Context) error {
	r.mu.Lock()
	if r.closeDone {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	type leftover struct {
		key string
		h   *holding
		e   *entry
	}
	var left []leftover
	for k, h := range r.locks {
		if h.e != nil && !h.held && h.acquiring == 0 {
			left = append(left, leftover{k, h, h.e})
		}
	}
	k := r.ka
	r.ka = nil
	r.mu.Unlock()
	r.ears.stop()
	var errs []error
	if k != nil {
		if done := dropKeeper(k); done != nil {
			select { // the stream's goroutine ends as soon as its context does
			case <-done:
			case <-ctx.Done():
				errs = append(errs, fmt.Errorf("etcdlock: close: waiting for the keep-alive stream to stop: %w", ctx.Err()))
			}
		}
	}
	for _, sp := range r.takeSpares() {
		r.revokeLater(sp.id) // no key uses it: one that cannot be revoked lapses harmlessly
	}
	for _, l := range left {
		rctx, cancel := context.WithTimeout(ctx, revokeTimeout)
		err := r.revoke(rctx, l.e.lease)
		cancel()
		if err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			errs = append(errs, r.wrap(ctx, opKey("close: revoke", l.key), err))
			continue
		}
		r.lost(l.key, l.h, l.e)
	}
	if err := r.bg.wait(ctx); err != nil {
		errs = append(errs, fmt.Errorf("etcdlock: close: waiting for revocations in the background: %w", err))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	r.mu.Lock()
	r.closeDone = true
	r.mu.Unlock()
	return nil
}

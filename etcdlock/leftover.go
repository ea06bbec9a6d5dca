package etcdlock

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// A Release that fails (the cluster did not answer in time, a leader
// change) leaves this client's entry in the lock's directory, and the
// repository remembers it (Close revokes it). The next Acquire,
// AcquireOrWait or HandedLease on that key must not take that entry back
// as a hold: its holder asked to release it, so the waiters queued behind
// it come first, and a new hold must have a token greater than the
// released one's, as fenced storage refuses a token it has seen. They
// finish the release instead (delete the entry) and queue anew, with a
// new entry.

// releasedLeftover reports, with r.mu held, whether e is such an entry:
// it held (its deadline's timer was armed), a Release disarmed it, and
// neither that Release (which forgets the entry when it succeeds) nor the
// cluster ended it. A place in a queue has never held; an entry that holds
// is armed.
func releasedLeftover(e *entry) bool { return e.timer != nil && !e.holds && !e.gone }

// finishRelease deletes e, a released leftover of key, in a transaction
// that deletes it only if it still exists with its create revision, and
// revokes its lease in the background (no key uses it then); the next
// entry by create revision then holds the lock. It forgets e.
func (r *Repository) finishRelease(ctx context.Context, key string, h *holding, e *entry) error {
	start := time.Now()
	_, err := r.c.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(e.n.entry), "=", e.rev)).
		Then(clientv3.OpDelete(e.n.entry)).Commit()
	r.cfg.tel.request("release", start, err)
	if err != nil {
		return err
	}
	r.mu.Lock()
	lease := e.lease
	r.mu.Unlock()
	r.lost(key, h, e)
	r.revokeLater(lease)
	return nil
}

// againAfterRelease is the start of again: a released leftover is
// released for good, and known is false, so that an acquisition writes a
// new entry and a claim finds nothing.
func (r *Repository) againAfterRelease(ctx context.Context, key string, h *holding, e *entry) (done bool, known bool, err error) {
	r.mu.Lock()
	left := releasedLeftover(e)
	r.mu.Unlock()
	if !left {
		return false, false, nil
	}
	if err := r.finishRelease(ctx, key, h, e); err != nil {
		return true, true, err
	}
	return true, false, nil
}

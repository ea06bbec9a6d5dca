package jdbc

import (
	"context"

	"github.com/lockreg/lockreg/internal/dialect"
)

// Close makes later Acquire calls fail with an error wrapping
// registry.ErrClosed, stops the background clean-up (cancelling a pass in
// flight and waiting, until ctx is done, for it to end), and releases
// (expires) this client's unexpired rows in its region that it does not
// hold: rows left behind by a Release that failed, or by an earlier process
// with the same client id, and the clean-up's lease, so that another
// repository takes the clean-up over at its next interval. It never
// releases a lease that is held or being acquired; Renew and Release keep
// working on those.
//
// It costs one UPDATE when no key is held, and otherwise a SELECT of this
// client's unexpired rows plus an UPDATE for each one not held. It closes the prepared
// statements. Once a Close has succeeded, Close returns nil without I/O; a
// Close that failed may be retried.
func (r *LockRepository) Close(ctx context.Context) error {
	r.mu.Lock()
	if r.cleaned {
		r.mu.Unlock()
		return nil
	}
	first := !r.closed
	r.closed = true
	noneHeld := len(r.held) == 0 // the held set can only shrink from now on
	r.mu.Unlock()

	if first {
		// The pass in flight is cancelled; its goroutine ends at once.
		r.cleaner.Stop(ctx)
		if r.listeners != nil {
			r.listeners.stop()
		}
		if r.queue != nil {
			r.queue.acquireOrWait.close()
			r.queue.handed.close()
		}
		r.acquire.close()
		r.renew.close()
		r.release.close()
		for _, st := range []*stmt{r.expire, r.take, r.takeBatch, r.expireBatch} {
			if st != nil {
				st.close()
			}
		}
	}
	if err := r.releaseUnheld(ctx, noneHeld); err != nil {
		return r.wrap(ctx, "jdbc: close", err)
	}
	r.mu.Lock()
	r.cleaned = true
	r.mu.Unlock()
	return nil
}

func (r *LockRepository) releaseUnheld(ctx context.Context, noneHeld bool) error {
	p, s := r.params("", 0), r.sql
	if noneHeld {
		_, err := r.db.ExecContext(ctx, s.expireMine.SQL, p.args(s.expireMine)...)
		return err
	}
	keys, err := dialect.Strings(r.db.QueryContext(ctx, s.selectMine.SQL, p.args(s.selectMine)...))
	if err != nil {
		return err
	}
	for _, k := range keys {
		if r.isHeld(k) {
			continue
		}
		p.lockKey = k
		if _, err := r.db.ExecContext(ctx, s.expireOne.SQL, p.args(s.expireOne)...); err != nil {
			return err
		}
	}
	return nil
}

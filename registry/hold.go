package registry

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/lockreg/lockreg/internal/backoff"
)

// hold is one hold of a key's lease, from its acquisition to its release,
// and keeps the lease's lifecycle apart from exclusion, as etcd's
// concurrency.Session does apart from its Mutex: it knows when the lease
// expires, closes done at the safety margin unless the lease was renewed
// by then (the watchdog), renews it in the background with
// [WithKeepAlive], and releases it at unlock.
type hold struct {
	k     *keyState
	reg   *Registry
	key   string
	token int64

	mu       sync.Mutex    // guards what follows
	done     chan struct{} // made by the first Done call; closed when lost is set
	ttl      time.Duration // of the lease, for renewals
	expiry   time.Time     // local time by which the lease ends unless renewed
	deadline time.Time     // expiry less the safety margin: done closes then
	lost     bool          // the hold ended or may have: done, if made, is closed
	lostLive bool          // done closed before the unlock
	ended    bool          // unlocked: renewals no longer count
	renewal  *time.Timer   // keep-alive; nil without WithKeepAlive
	tel      *holdTel      // nil without telemetry
}

// newHold returns the hold of lease of k, taken for ttl by the
// acquisition of ctx; keyState.setCurrent arms it.
func newHold(ctx context.Context, k *keyState, lease Lease, ttl time.Duration) *hold {
	return &hold{k: k, reg: k.reg, key: k.key, token: lease.Token, ttl: ttl,
		tel: k.reg.tel.startHold(ctx, k.key, lease.Token)}
}

// arm sets the expiry from the send time of the statement that took or
// renewed the lease for length (the database computed the expiry later, so
// the lease lasts at least this long) and schedules the watchdog and
// keep-alive. h.mu must be held.
func (h *hold) arm(sent time.Time, length time.Duration) {
	h.expiry = sent.Add(length)
	h.deadline = h.expiry.Add(-h.ttl / 5)
	if k := h.k; k.watchdog == nil {
		k.watchdog = time.AfterFunc(time.Until(h.deadline), k.watch)
	} else {
		k.watchdog.Reset(time.Until(h.deadline))
	}
	if !h.reg.opts.keepAlive {
		return
	}
	next := time.Until(sent.Add(length / 3))
	if h.renewal == nil {
		h.renewal = time.AfterFunc(next, h.keepAlive)
	} else {
		h.renewal.Reset(next)
	}
}

// watch closes done once the deadline has passed.
func (h *hold) watch() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ended || h.lost {
		return
	}
	if wait := time.Until(h.deadline); wait > 0 { // renewed as the timer fired, or a firing for an earlier hold
		h.k.watchdog.Reset(wait)
		return
	}
	h.lose(lossExpired)
	if h.reg.opts.keepAlive {
		h.reg.report(h.key, wrap("keep-alive", h.key, errors.New("lease not renewed before its safety margin; Done closed")))
	}
}

// lose closes done and stops renewals, for reason. h.mu must be held.
func (h *hold) lose(reason lossReason) {
	if h.lost {
		return
	}
	h.lost = true
	if h.done != nil {
		close(h.done)
	}
	if reason != lossNone {
		h.lostLive = true
		h.tel.lost(reason)
	}
	if h.renewal != nil {
		h.renewal.Stop()
	}
}

// doneChan returns the channel of Lock.Done: closed once lost, made only
// when asked for, since most holds are never asked.
func (h *hold) doneChan() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.lost {
		return closedChan
	}
	if h.done == nil {
		h.done = make(chan struct{})
	}
	return h.done
}

// end finishes the hold at unlock, before its lease is released.
func (h *hold) end() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ended = true
	if w := h.k.watchdog; w != nil {
		w.Stop() // the key's next hold resets it
	}
	h.lose(lossNone)
}

// live reports whether the hold has not ended.
func (h *hold) live() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return !h.ended
}

// renew extends the lease by ttl, or by the TTL it has if ttl is 0.
func (h *hold) renew(ctx context.Context, ttl time.Duration) error {
	h.mu.Lock()
	lost := h.lost
	if ttl == 0 {
		ttl = h.ttl
	}
	h.mu.Unlock()
	if lost {
		return wrap("renew", h.key, errGivenUp)
	}
	sent := time.Now()
	err := h.retry(ctx, retryRenew, ttl)
	if h.renewed(ttl, sent, err) {
		return wrap("renew", h.key, errGivenUp)
	}
	return err
}

// renewed records the outcome of a renewal for ttl sent at sent. It
// reports whether the renewal succeeded after done had closed: done never
// reopens, so such a renewal does not revive the hold.
func (h *hold) renewed(ttl time.Duration, sent time.Time, err error) (givenUp bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ended {
		return false
	}
	h.tel.renewed(err == nil && !h.lost, err)
	switch {
	case err == nil && h.lost:
		return true
	case err == nil:
		h.ttl = ttl
		h.arm(sent, ttl)
	case errors.Is(err, ErrLockLost):
		h.lose(lossRenewal)
	}
	return false
}

// keepAlive renews the lease in the background, retrying failures until
// the deadline, when the watchdog gives up on it. It stops when the
// registry closes.
func (h *hold) keepAlive() {
	if !h.reg.startBackground() {
		return
	}
	defer h.reg.endBackground()
	h.mu.Lock()
	live, ttl, deadline := !h.ended && !h.lost, h.ttl, h.deadline
	h.mu.Unlock()
	if !live {
		return
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	bo := newBackoff(h.reg.opts.idle)
	for {
		sent := time.Now()
		err := h.reg.repo.Renew(ctx, h.key, ttl)
		if err == nil || errors.Is(err, ErrLockLost) || ctx.Err() != nil {
			if err != nil && h.live() {
				h.reg.report(h.key, wrap("keep-alive", h.key, err))
			}
			h.renewed(ttl, sent, err)
			return
		}
		if !h.live() {
			return
		}
		h.reg.report(h.key, wrap("keep-alive (retrying)", h.key, err))
		h.reg.tel.retried(retryKeepAlive)
		if !backoff.Sleep(ctx, bo.Next(), h.reg.done) {
			return // the watchdog closes done
		}
	}
}

// release gives the lease back to the repository after end.
func (h *hold) release(ctx context.Context) (err error) {
	h.mu.Lock()
	lostLive := h.lostLive
	h.mu.Unlock()
	if h.tel != nil {
		var span trace.Span
		ctx, span = h.tel.startRelease(ctx)
		defer func() { h.tel.ended(ctx, span, lostLive, err) }()
	}
	return h.retry(ctx, retryRelease, 0)
}

// retry makes the renewal for renewTTL (op retryRenew) or the release (op
// retryRelease), each call bounded by the hold's TTL, and retries
// transient errors with backoff until ctx is done or the next retry would
// start after the lease's expiry, when a retry could no longer matter. It
// returns nil, the first error that is not transient, ctx's error, or,
// when it gives up, an error wrapping both ErrLockLost and the last
// transient error: the lease runs out before any retry could succeed, so
// the hold is over whatever the repository did, and a caller must treat
// the guarded data as possibly changed by another holder.
func (h *hold) retry(ctx context.Context, op retryOp, renewTTL time.Duration) error {
	name := "unlock"
	if op == retryRenew {
		name = "renew"
	}
	h.mu.Lock()
	ttl, expiry := h.ttl, h.expiry
	h.mu.Unlock()
	var bo *backoff.Backoff // made only once a call fails
	ambiguous := false      // an earlier release failed and may have committed
	for {
		sent := time.Now()
		actx, cancel := h.reg.bound(ctx, ttl, sent)
		var err error
		if op == retryRenew {
			err = h.reg.repo.Renew(actx, h.key, renewTTL)
		} else {
			err = h.reg.repo.Release(actx, h.key)
			if ambiguous && errors.Is(err, ErrLockLost) && sent.Before(expiry) {
				// The lease was unexpired when this attempt was sent, so
				// only our own earlier release (or its hand-off) can have
				// made the row another client's: that attempt committed
				// and its reply was lost.
				err = nil
			}
			ambiguous = ambiguous || err != nil
		}
		err = transient(ctx, actx, err) // before cancel, which ends actx too
		if cancel != nil {
			cancel()
		}
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil || !errors.Is(err, ErrTransient):
			return wrap(name, h.key, err)
		}
		if bo == nil {
			bo = newBackoff(h.reg.opts.idle)
		}
		delay := bo.Next()
		if time.Until(expiry) < delay {
			return wrap(name, h.key, fmt.Errorf("%w: gave up as the lease expires before a retry: %w", ErrLockLost, err))
		}
		h.reg.report(h.key, wrap(name+" (retrying)", h.key, err))
		h.reg.tel.retried(op)
		if !backoff.Sleep(ctx, delay, nil) {
			return wrap(name, h.key, ctx.Err())
		}
	}
}

package registry

import (
	"context"
	"errors"
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
	reg   *Registry
	key   string
	token int64
	done  chan struct{} // closed at most once, when the hold ends or may have

	mu       sync.Mutex    // guards what follows
	ttl      time.Duration // of the lease, for renewals
	expiry   time.Time     // local time by which the lease ends unless renewed
	deadline time.Time     // expiry less the safety margin: done closes then
	lost     bool          // done is closed
	lostLive bool          // done closed before the unlock
	ended    bool          // unlocked: renewals no longer count
	watchdog *time.Timer   // closes done at deadline
	renewal  *time.Timer   // keep-alive; nil without WithKeepAlive
	tel      *holdTel      // nil without telemetry
}

// newHold returns the armed hold of lease, taken for ttl by a statement
// sent at sent, by the acquisition of ctx. A lease handed over lasts only
// what remained of it.
func newHold(ctx context.Context, reg *Registry, key string, lease Lease, ttl time.Duration, sent time.Time) *hold {
	h := &hold{reg: reg, key: key, token: lease.Token, ttl: ttl, done: make(chan struct{}),
		tel: reg.tel.startHold(ctx, key, lease.Token)}
	length := ttl
	if lease.TTL > 0 {
		length = lease.TTL
	}
	h.mu.Lock()
	h.arm(sent, length)
	h.mu.Unlock()
	return h
}

// arm sets the expiry from the send time of the statement that took or
// renewed the lease for length (the database computed the expiry later, so
// the lease lasts at least this long) and schedules the watchdog and
// keep-alive. h.mu must be held.
func (h *hold) arm(sent time.Time, length time.Duration) {
	h.expiry = sent.Add(length)
	h.deadline = h.expiry.Add(-h.ttl / 5)
	if h.watchdog == nil {
		h.watchdog = time.AfterFunc(time.Until(h.deadline), h.watch)
	} else {
		h.watchdog.Reset(time.Until(h.deadline))
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
	if wait := time.Until(h.deadline); wait > 0 { // renewed as the timer fired
		h.watchdog.Reset(wait)
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
	close(h.done)
	if reason != lossNone {
		h.lostLive = true
		h.tel.lost(reason)
	}
	if h.renewal != nil {
		h.renewal.Stop()
	}
}

// end finishes the hold at unlock, before its lease is released.
func (h *hold) end() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ended = true
	if h.watchdog != nil {
		h.watchdog.Stop()
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
	err := h.retry(ctx, "renew", func(ctx context.Context) error {
		return h.reg.repo.Renew(ctx, h.key, ttl)
	})
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
	expiry, lostLive := h.expiry, h.lostLive
	h.mu.Unlock()
	if h.tel != nil {
		var span trace.Span
		ctx, span = h.tel.startRelease(ctx)
		defer func() { h.tel.ended(ctx, span, lostLive, err) }()
	}
	ambiguous := false // an earlier attempt failed and may have committed
	return h.retry(ctx, "unlock", func(ctx context.Context) error {
		sent := time.Now()
		err := h.reg.repo.Release(ctx, h.key)
		if ambiguous && errors.Is(err, ErrLockLost) && sent.Before(expiry) {
			// The lease was unexpired when this attempt was sent, so only
			// our own earlier release (or its hand-off) can have made the
			// row another client's: that attempt committed and its reply
			// was lost.
			return nil
		}
		if err != nil {
			ambiguous = true
		}
		return err
	})
}

// retry runs the release or renewal call for op, retrying transient errors
// until ctx is done or the lease has run out its TTL.
func (h *hold) retry(ctx context.Context, op string, call func(context.Context) error) error {
	h.mu.Lock()
	ttl, expiry := h.ttl, h.expiry
	h.mu.Unlock()
	err := retryUntil(ctx, expiry, ttl, h.reg.opts.idle, func(err error) {
		h.reg.report(h.key, wrap(op+" (retrying)", h.key, err))
		if op == "renew" {
			h.reg.tel.retried(retryRenew)
		} else {
			h.reg.tel.retried(retryRelease)
		}
	}, call)
	return wrap(op, h.key, err)
}

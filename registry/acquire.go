package registry

import (
	"context"
	"errors"
	"time"

	"github.com/lockreg/lockreg/internal/backoff"
)

type waitMode int

const (
	waitNever         waitMode = iota // one attempt
	waitUntilDeadline                 // false, nil when ctx's deadline passes
	waitAlways                        // until acquired or ctx is done
)

// pastDeadline reports whether ctx's deadline has passed by the clock, which
// may be a moment before ctx itself notices. Not starting a statement then
// avoids abandoning it half-way.
func pastDeadline(ctx context.Context) bool {
	d, ok := ctx.Deadline()
	return ok && !time.Now().Before(d)
}

// deadlineIsNotError turns the passing of a TryLockContext deadline into a
// plain "not acquired".
func deadlineIsNotError(ctx context.Context, mode waitMode) error {
	err := ctx.Err()
	if err == nil {
		err = context.DeadlineExceeded // pastDeadline
	}
	if mode == waitUntilDeadline && errors.Is(err, context.DeadlineExceeded) {
		return nil
	}
	return err
}

// acquisition is one call's effort to take the lease of a key whose local
// primitive it holds.
type acquisition struct {
	k       *keyState
	ttl     time.Duration
	mode    waitMode
	queue   Queue            // nil if the repository is none
	handOff HandOffQueue     // nil if the repository is none
	bo      *backoff.Backoff // nil until a transient error is retried

	ambiguous bool // the last attempt may have taken the lease
	contended bool // an attempt found the lease held elsewhere
	queued    bool // this client may have a place in the key's queue
	woken     bool // by an announcement, which may be a hand-off
	timer     *time.Timer
	wake      chan struct{} // announcements of releases; nil until subscribed
	stop      func()        // ends the subscription
}

// takeLease asks the repository for the lease, holding the local primitive,
// until acquired or mode says stop; when it fails it gives the local
// primitive up. If the last attempt failed in a way that may have committed
// anyway (a cancellation or a dropped connection), the lease is released in
// the background before the local primitive is given up, so that no one in
// this process can take the key while a stale release is pending.
func (k *keyState) takeLease(ctx context.Context, ttl time.Duration, mode waitMode) (acquired bool, err error) {
	a := &acquisition{k: k, ttl: ttl, mode: mode}
	a.queue, _ = k.reg.repo.(Queue)
	a.handOff, _ = k.reg.repo.(HandOffQueue)
	defer func() { a.finish(acquired) }()
	return a.run(ctx)
}

func (a *acquisition) run(ctx context.Context) (bool, error) {
	k := a.k
	if k.contended && a.mode != waitNever {
		a.subscribe()
	}
	for {
		if ctx.Err() != nil || pastDeadline(ctx) {
			return false, wrap("lock", k.key, deadlineIsNotError(ctx, a.mode))
		}
		sent := time.Now()
		actx, cancel := k.reg.bound(ctx, a.ttl, sent)
		lease, ok, err := a.ask(actx)
		err = transient(ctx, actx, err) // before cancel, which ends actx too
		if cancel != nil {
			cancel()
		}
		a.ambiguous = err != nil && (errors.Is(err, ErrTransient) || ctx.Err() != nil)
		var delay time.Duration
		switch {
		case err == nil && ok:
			a.queued = false // taking the lease left the queue
			k.contended = a.contended
			k.setCurrent(ctx, lease, a.ttl, sent)
			return true, nil
		case err == nil:
			if a.mode == waitNever {
				return false, nil
			}
			delay = a.heldElsewhere()
		case ctx.Err() != nil:
			return false, wrap("lock", k.key, deadlineIsNotError(ctx, a.mode))
		case errors.Is(err, ErrTransient):
			if a.mode == waitNever {
				return false, wrap("lock", k.key, err)
			}
			k.reg.report(k.key, wrap("lock (retrying)", k.key, err))
			k.reg.tel.retried(retryAcquire)
			if a.bo == nil { // made only once a try fails: most acquisitions never retry
				a.bo = newBackoff(k.reg.opts.idle)
			}
			delay = a.bo.Next()
		default:
			return false, wrap("lock", k.key, err)
		}
		if ok, err := a.sleep(ctx, delay); !ok {
			return false, err
		}
	}
}

// ask makes one request for the lease: after an announcement, whether a
// release handed it to this client; then to take it, queueing for it when
// the call waits.
func (a *acquisition) ask(ctx context.Context) (Lease, bool, error) {
	if a.handOff != nil && a.woken {
		a.woken = false
		if lease, ok, err := a.handOff.HandedLease(ctx, a.k.key); ok || err != nil {
			if ok {
				a.k.reg.tel.handedOff(ctx)
			}
			return lease, ok, err
		}
	}
	if a.queue != nil && a.mode != waitNever {
		a.queued = true
		return a.queue.AcquireOrWait(ctx, a.k.key, a.ttl)
	}
	return a.k.reg.repo.Acquire(ctx, a.k.key, a.ttl)
}

// heldElsewhere returns how long to wait after finding the lease held by
// another client: the idle interval, or nothing when it first subscribes
// to a [Notifier], since a release between the attempt and the
// subscription would go unheard.
func (a *acquisition) heldElsewhere() time.Duration {
	a.contended = true
	if a.bo != nil {
		a.bo.Reset()
	}
	if a.wake == nil && a.subscribe() {
		return 0
	}
	return a.k.reg.opts.idle
}

// subscribe subscribes to the releases of the key if the repository is a
// [Notifier], and reports whether it did. An acquisition of a key that was
// contended last time subscribes before its first attempt, which then
// hears every later release: it saves the second attempt that a
// subscription after a failed one needs, one statement per contended
// acquisition, and costs an uncontended one nothing.
func (a *acquisition) subscribe() bool {
	n, ok := a.k.reg.repo.(Notifier)
	if !ok {
		return false
	}
	a.wake = make(chan struct{}, 1)
	a.stop = n.Notify(a.k.key, a.wake)
	return true
}

// sleep waits for delay, ctx's deadline or an announcement, and reports
// whether to try again; if not, it returns what the call returns.
func (a *acquisition) sleep(ctx context.Context, delay time.Duration) (bool, error) {
	if deadline, ok := ctx.Deadline(); ok {
		delay = min(delay, time.Until(deadline))
	}
	if a.timer == nil {
		a.timer = time.NewTimer(delay)
	} else {
		a.timer.Reset(delay)
	}
	select {
	case <-a.timer.C:
	case <-a.wake:
		a.woken = true
	case <-ctx.Done():
		return false, wrap("lock", a.k.key, deadlineIsNotError(ctx, a.mode))
	case <-a.k.reg.done:
		return false, wrap("lock", a.k.key, ErrClosed)
	}
	return true, nil
}

// finish stops listening and, unless the lease was acquired, gives up the
// local primitive, after cleaning up what the last attempt may have left.
func (a *acquisition) finish(acquired bool) {
	if a.timer != nil {
		a.timer.Stop()
	}
	if a.stop != nil {
		a.stop()
	}
	switch {
	case acquired:
	case a.ambiguous || a.queued:
		a.k.cleanup(a.ttl, a.ambiguous, a.queued)
	default:
		a.k.releaseLocal()
	}
}

// cleanup releases a lease that an abandoned attempt may have taken and
// leaves the key's queue, as needed, then gives up the local primitive,
// which it holds meanwhile so that no one in this process takes the key
// while a stale release or leave is pending. It runs in the background so
// that the caller returns by its deadline, unless the registry is closing.
func (k *keyState) cleanup(ttl time.Duration, release, leave bool) {
	k.startCleaning()
	run := func() {
		ctx, cancel := context.WithTimeout(context.Background(), ttl)
		defer cancel()
		if release {
			if err := k.reg.repo.Release(ctx, k.key); err != nil && !errors.Is(err, ErrLockLost) {
				k.reg.report(k.key, wrap("release of abandoned attempt", k.key, err))
			}
		}
		if q, ok := k.reg.repo.(Queue); ok && leave {
			if err := q.Leave(ctx, k.key); err != nil {
				k.reg.report(k.key, wrap("leave queue", k.key, err))
			}
		}
		k.endCleaning()
	}
	if !k.reg.startBackground() {
		run()
		return
	}
	go func() {
		defer k.reg.endBackground()
		run()
	}()
}

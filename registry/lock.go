package registry

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Lock is a keyed lock obtained from a [LockRegistry]. Holding it means
// holding both the local per-key primitive and an unexpired lease in the
// registry's repository.
//
// A Lock is not reentrant: locking it again from the goroutine that holds it
// waits for that goroutine. It may be unlocked from any goroutine.
//
// The context-free methods (Lock, TryLock, Unlock) make it a [sync.Locker];
// they panic where the context forms would return a non-transient error,
// and so suit code that treats the database being unusable as fatal. Prefer
// the context forms elsewhere.
type Lock interface {
	sync.Locker

	// LockContext waits until the lock is held with the registry's TTL or
	// ctx is done. Transient repository errors are retried with capped,
	// jittered backoff (and reported to the error handler); other errors
	// are returned. It returns ctx's error, wrapped, when ctx ends first,
	// and ErrClosed when the registry closes.
	LockContext(ctx context.Context) error

	// LockTTL is LockContext with a lease of ttl instead of the registry's
	// TTL (Spring 7's lock(Duration)); later Renew calls keep using ttl.
	LockTTL(ctx context.Context, ttl time.Duration) error

	// TryLock makes one attempt to take the lock and reports whether it
	// did. It reports false only when the lock is held or being taken,
	// here or elsewhere: if an earlier call of this process that failed is
	// still cleaning up in the background (releasing what an abandoned
	// statement may have taken, leaving the key's queue), TryLock waits
	// for that, at most about the TTL, and then asks the repository.
	// Transient repository errors count as a failed attempt and go to the
	// error handler; it panics on other errors and on a closed registry.
	TryLock() bool

	// TryLockContext reports whether it took the lock. When ctx has a
	// deadline it waits for the lock until that deadline and returns false,
	// with a nil error, by the deadline (not up to an idle interval later).
	// Without a deadline it makes one attempt, as TryLock does (waiting,
	// like it, for a clean-up in progress). It returns
	// an error, with false, when ctx is canceled, when the registry is
	// closed, and on non-transient repository errors; a transient error of
	// the single attempt is returned too.
	TryLockContext(ctx context.Context) (bool, error)

	// TryLockTTL is TryLockContext with a lease of ttl.
	TryLockTTL(ctx context.Context, ttl time.Duration) (bool, error)

	// Unlock releases the lock. It panics if the lock is not held, as
	// sync.Mutex does. It never panics for a lost lease: the local lock is
	// released in every case, and a lost lease or a release that failed is
	// reported to the registry's error handler. Transient errors are
	// retried until the lease would have expired anyway.
	Unlock()

	// UnlockContext releases the lock and reports what Unlock would pass to
	// the error handler: an error wrapping ErrLockLost when the lease had
	// expired and is no longer this holder's, so the guarded data may have
	// been changed by another process. It returns ErrNotHeld, without
	// panicking, if the lock is not held. The local lock is released in
	// every other case.
	UnlockContext(ctx context.Context) error

	// Renew extends the held lease by the TTL it was taken with (Spring's
	// renewLock). It returns ErrNotHeld if the lock is not held and an error
	// wrapping ErrLockLost if the lease already expired: renewal never
	// revives an expired lease. Done closes once per hold and never
	// reopens, so once it has closed (the safety margin passed, or a
	// renewal found the lease lost) the hold counts as lost: Renew then
	// returns an error wrapping ErrLockLost without asking the repository,
	// and so does a renewal whose reply arrives after Done closed. Unlock
	// and lock again to go on. The lock stays held locally in all these
	// cases until unlocked. Transient errors are retried until ctx is done
	// or the lease has expired.
	Renew(ctx context.Context) error

	// RenewTTL is Renew with a new lease duration, used from then on.
	RenewTTL(ctx context.Context, ttl time.Duration) error

	// Token returns the fencing token of the current hold: greater than the
	// token of every earlier hold of the key, in any process. Pass it to
	// the storage the lock guards and let it refuse writes that carry a
	// token lower than the last one it saw: a holder that stalled past its
	// lease is then refused. It returns 0 if the lock is not held or the
	// repository issues no tokens.
	Token() int64

	// Done returns a channel that is closed when the current hold ends or
	// may have ended: on unlock, when a renewal finds the lease lost, and a
	// safety margin (a fifth of the TTL) before the lease would expire
	// unless it has been renewed by then. Work guarded by the lock should
	// stop when it closes. It closes at most once per hold and never
	// reopens: a later Renew reports ErrLockLost. For a lock that is not held it returns a closed
	// channel. With [WithKeepAlive] leases are renewed in the background,
	// so Done closes only when renewal fails for too long.
	Done() <-chan struct{}

	// Key returns the key the lock was obtained for.
	Key() string
}

// lock is both the handle returned by Obtain and, for the object that is
// live in the registry, the state of its key. A handle whose object was
// evicted and replaced forwards every operation to the live object.
type lock struct {
	reg *Registry
	key string

	// Guarded by reg.mu.
	refs     int // waiters plus the holder
	lastUsed time.Time

	// sem holds one token while a goroutine of this process owns the key
	// locally; only the owner talks to the repository, so local waiters
	// never touch the database.
	sem  chan struct{}
	held atomic.Bool // the lease is taken and not yet unlocked

	mu  sync.Mutex // guards cur and its fields, and cleaning
	cur *hold      // the current hold, nil when not held
	// cleaning, while not nil, says that sem's token is held by the
	// clean-up of an abandoned attempt, not by a holder or a taker; it is
	// closed when the clean-up gives the token back. Giving it back and
	// clearing cleaning happen together under mu.
	cleaning chan struct{}
}

// hold is one acquisition of a lock, from the lease's acquisition to its
// release.
type hold struct {
	token    int64
	ttl      time.Duration
	expiry   time.Time // local time by which the lease ends unless renewed
	deadline time.Time // expiry less the safety margin: Done closes then
	done     chan struct{}
	lost     bool        // done is closed
	watchdog *time.Timer // closes done at deadline
	renewal  *time.Timer // keep-alive; nil without WithKeepAlive
}

// closedChan is what Done returns for a lock that is not held.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func newLock(r *Registry, key string) *lock {
	return &lock{reg: r, key: key, lastUsed: time.Now(), sem: make(chan struct{}, 1)}
}

func (h *lock) Key() string { return h.key }

func (h *lock) Lock() {
	if err := h.LockContext(context.Background()); err != nil {
		panic(err)
	}
}

func (h *lock) LockContext(ctx context.Context) error {
	return h.LockTTL(ctx, h.reg.opts.ttl)
}

func (h *lock) LockTTL(ctx context.Context, ttl time.Duration) error {
	_, err := h.take(ctx, ttl, waitAlways)
	return err
}

func (h *lock) TryLock() bool {
	ok, err := h.TryLockContext(context.Background())
	if err != nil {
		if errors.Is(err, ErrTransient) {
			h.reg.report(h.key, err)
			return false
		}
		panic(err)
	}
	return ok
}

func (h *lock) TryLockContext(ctx context.Context) (bool, error) {
	return h.TryLockTTL(ctx, h.reg.opts.ttl)
}

func (h *lock) TryLockTTL(ctx context.Context, ttl time.Duration) (bool, error) {
	if _, ok := ctx.Deadline(); ok {
		return h.take(ctx, ttl, waitUntilDeadline)
	}
	return h.take(ctx, ttl, waitNever)
}

type waitMode int

const (
	waitNever         waitMode = iota // one attempt
	waitUntilDeadline                 // false, nil when ctx's deadline passes
	waitAlways                        // until acquired or ctx is done
)

// take acquires the local primitive and then the lease.
func (h *lock) take(ctx context.Context, ttl time.Duration, mode waitMode) (bool, error) {
	if ttl <= 0 {
		return false, fmt.Errorf("registry: lock %q with ttl %v: %w", h.key, ttl, ErrInvalidTTL)
	}
	l, err := h.reg.pin(h)
	if err != nil {
		return false, h.wrap("lock", err)
	}
	if ok, err := l.takeLocal(ctx, mode); !ok {
		l.reg.unpin(l)
		return false, h.wrap("lock", err)
	}
	return l.takeLease(ctx, ttl, mode)
}

// takeLocal waits for the key's local primitive as mode allows. A single
// attempt (waitNever) still waits for the clean-up of an abandoned attempt,
// which is no holder, so that it reports the key's real state: what the
// repository says, not "held" because a failed call is tidying up.
func (l *lock) takeLocal(ctx context.Context, mode waitMode) (bool, error) {
	for {
		ok, cleaning := l.tryLocal()
		if ok {
			return true, nil
		}
		if mode != waitNever {
			break
		}
		if cleaning == nil {
			return false, nil // held or being taken in this process
		}
		select {
		case <-cleaning:
		case <-ctx.Done():
			return false, ctx.Err()
		case <-l.reg.done:
			return false, ErrClosed
		}
	}
	select {
	case l.sem <- struct{}{}:
		return true, nil
	case <-ctx.Done():
		return false, deadlineIsNotError(ctx, mode)
	case <-l.reg.done:
		return false, ErrClosed
	}
}

// tryLocal takes the local primitive if it is free; if not, it returns the
// pending clean-up that holds it, if any.
func (l *lock) tryLocal() (bool, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case l.sem <- struct{}{}:
		return true, nil
	default:
		return false, l.cleaning
	}
}

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

// takeLease asks the repository for the lease, holding the local primitive,
// until acquired or mode says stop; when it fails it gives the local
// primitive up. If the last attempt failed in a way that may have committed
// anyway (a cancellation or a dropped connection), the lease is released in
// the background before the local primitive is given up, so that no one in
// this process can take the key while a stale release is pending.
func (l *lock) takeLease(ctx context.Context, ttl time.Duration, mode waitMode) (acquired bool, err error) {
	var (
		bo        = newBackoff(l.reg.opts.idle)
		ambiguous bool // the last attempt may have taken the lease
		queued    bool // this client may have a place in the key's queue
		timer     *time.Timer
		wake      chan struct{} // announcements of releases
		stop      func()
	)
	queue, _ := l.reg.repo.(Queue)
	claimer, _ := l.reg.repo.(Claimer)
	woken := false // by an announcement
	defer func() {
		if timer != nil {
			timer.Stop()
		}
		if stop != nil {
			stop()
		}
		switch {
		case acquired:
		case ambiguous || queued:
			l.cleanup(ttl, ambiguous, queued)
		default:
			l.releaseLocal()
		}
	}()
	for {
		if ctx.Err() != nil || pastDeadline(ctx) {
			return false, l.wrap("lock", deadlineIsNotError(ctx, mode))
		}
		var lease Lease
		sent := time.Now()
		ok, aerr := l.attempt(ctx, ttl, func(ctx context.Context) (ok bool, err error) {
			if claimer != nil && woken {
				// An announcement may mean the lease was handed to us.
				woken = false
				if lease, ok, err = claimer.Claim(ctx, l.key); ok || err != nil {
					return ok, err
				}
			}
			if queue != nil && mode != waitNever {
				queued = true
				lease, ok, err = queue.AcquireOrWait(ctx, l.key, ttl)
			} else {
				lease, ok, err = l.reg.repo.Acquire(ctx, l.key, ttl)
			}
			return ok, err
		})
		ambiguous = aerr != nil && (errors.Is(aerr, ErrTransient) || ctx.Err() != nil)
		var delay time.Duration
		switch {
		case aerr == nil && ok:
			queued = false // taking the lease left the queue
			h := &hold{token: lease.Token, ttl: ttl, done: make(chan struct{})}
			length := ttl
			if lease.TTL > 0 {
				length = lease.TTL // what remains of a lease handed over
			}
			l.mu.Lock()
			l.cur = h
			l.arm(h, sent, length)
			l.mu.Unlock()
			l.held.Store(true)
			return true, nil
		case aerr == nil:
			if mode == waitNever {
				return false, nil
			}
			bo.reset()
			delay = l.reg.opts.idle
			if n, ok := l.reg.repo.(Notifier); ok && wake == nil {
				// Listen, then try once more at once: a release between
				// the attempt and the subscription would go unheard.
				wake = make(chan struct{}, 1)
				stop = n.Notify(l.key, wake)
				delay = 0
			}
		case ctx.Err() != nil:
			return false, l.wrap("lock", deadlineIsNotError(ctx, mode))
		case errors.Is(aerr, ErrTransient):
			if mode == waitNever {
				return false, l.wrap("lock", aerr)
			}
			l.reg.report(l.key, l.wrap("lock (retrying)", aerr))
			delay = bo.next()
		default:
			return false, l.wrap("lock", aerr)
		}
		if deadline, ok := ctx.Deadline(); ok {
			delay = min(delay, time.Until(deadline))
		}
		if timer == nil {
			timer = time.NewTimer(delay)
		} else {
			timer.Reset(delay)
		}
		select {
		case <-timer.C:
		case <-wake:
			woken = true
		case <-ctx.Done():
			return false, l.wrap("lock", deadlineIsNotError(ctx, mode))
		case <-l.reg.done:
			return false, l.wrap("lock", ErrClosed)
		}
	}
}

// attempt runs one repository call, bounded by ttl: a statement that takes
// longer than a lease would return a lease already expired.
func (l *lock) attempt(ctx context.Context, ttl time.Duration, call func(context.Context) (bool, error)) (bool, error) {
	actx, cancel := context.WithTimeout(ctx, ttl)
	defer cancel()
	ok, err := call(actx)
	if err != nil && ctx.Err() == nil && actx.Err() != nil {
		// Our own per-attempt timeout, not the caller's: worth a retry.
		err = Transient(err)
	}
	return ok, err
}

// cleanup releases a lease that an abandoned attempt may have taken and
// leaves the key's queue, as needed, then gives up the local primitive,
// which it holds meanwhile so that no one in this process takes the key
// while a stale release or leave is pending. It runs in the background so
// that the caller returns by its deadline, unless the registry is closing.
func (l *lock) cleanup(ttl time.Duration, release, leave bool) {
	l.mu.Lock()
	l.cleaning = make(chan struct{})
	l.mu.Unlock()
	run := func() {
		ctx, cancel := context.WithTimeout(context.Background(), ttl)
		defer cancel()
		if release {
			if err := l.reg.repo.Release(ctx, l.key); err != nil && !errors.Is(err, ErrLockLost) {
				l.reg.report(l.key, l.wrap("release of abandoned attempt", err))
			}
		}
		if q, ok := l.reg.repo.(Queue); ok && leave {
			if err := q.Leave(ctx, l.key); err != nil {
				l.reg.report(l.key, l.wrap("leave queue", err))
			}
		}
		l.mu.Lock()
		<-l.sem
		close(l.cleaning)
		l.cleaning = nil
		l.mu.Unlock()
		l.reg.unpin(l)
	}
	if !l.reg.startCleanup() {
		run()
		return
	}
	go func() {
		defer l.reg.endCleanup()
		run()
	}()
}

// releaseLocal gives up the local primitive and the registry pin.
func (l *lock) releaseLocal() {
	<-l.sem
	l.reg.unpin(l)
}

func (h *lock) Unlock() {
	if err := h.UnlockContext(context.Background()); err != nil {
		if errors.Is(err, ErrNotHeld) {
			panic("registry: unlock of unlocked lock " + fmt.Sprintf("%q", shortKey(h.key)))
		}
		h.reg.report(h.key, err)
	}
}

func (h *lock) UnlockContext(ctx context.Context) error {
	l := h.reg.holder(h.key)
	if l == nil || !l.held.CompareAndSwap(true, false) {
		return h.wrap("unlock", ErrNotHeld)
	}
	defer l.releaseLocal()
	l.mu.Lock()
	cur := l.cur
	expiry := cur.expiry
	l.cur = nil
	l.end(cur)
	l.mu.Unlock()
	ambiguous := false // an earlier attempt failed and may have committed
	return l.retry(ctx, "unlock", cur, func(ctx context.Context) error {
		sent := time.Now()
		err := l.reg.repo.Release(ctx, l.key)
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

func (h *lock) Renew(ctx context.Context) error {
	return h.renew(ctx, 0)
}

func (h *lock) RenewTTL(ctx context.Context, ttl time.Duration) error {
	if ttl <= 0 {
		return fmt.Errorf("registry: renew %q with ttl %v: %w", h.key, ttl, ErrInvalidTTL)
	}
	return h.renew(ctx, ttl)
}

func (h *lock) renew(ctx context.Context, ttl time.Duration) error {
	l := h.reg.holder(h.key)
	if l == nil {
		return h.wrap("renew", ErrNotHeld)
	}
	l.mu.Lock()
	cur := l.cur
	lost := cur != nil && cur.lost
	if cur != nil && ttl == 0 {
		ttl = cur.ttl
	}
	l.mu.Unlock()
	if cur == nil {
		return h.wrap("renew", ErrNotHeld)
	}
	if lost {
		return h.wrap("renew", errGivenUp)
	}
	sent := time.Now()
	err := l.retry(ctx, "renew", cur, func(ctx context.Context) error {
		return l.reg.repo.Renew(ctx, l.key, ttl)
	})
	if l.renewed(cur, ttl, sent, err) {
		return h.wrap("renew", errGivenUp)
	}
	return err
}

// errGivenUp reports a renewal of a hold whose Done channel has closed.
var errGivenUp = fmt.Errorf("%w: Done closed before the renewal took effect, so the hold is given up; unlock and lock again", ErrLockLost)

// renewed records the outcome of a renewal of h sent at sent. It reports
// whether the renewal succeeded after h's Done channel had closed: Done
// never reopens, so such a renewal does not revive the hold.
func (l *lock) renewed(h *hold, ttl time.Duration, sent time.Time, err error) (givenUp bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cur != h {
		return false // unlocked meanwhile
	}
	switch {
	case err == nil && h.lost:
		return true
	case err == nil:
		h.ttl = ttl
		l.arm(h, sent, ttl)
	case errors.Is(err, ErrLockLost):
		l.lose(h)
	}
	return false
}

// arm sets h's expiry from the send time of the statement that took or
// renewed the lease for length (the database computed the expiry later, so
// the lease lasts at least this long) and schedules the watchdog and
// keep-alive. l.mu must be held.
func (l *lock) arm(h *hold, sent time.Time, length time.Duration) {
	h.expiry = sent.Add(length)
	h.deadline = h.expiry.Add(-h.ttl / 5)
	if h.watchdog == nil {
		h.watchdog = time.AfterFunc(time.Until(h.deadline), func() { l.watch(h) })
	} else {
		h.watchdog.Reset(time.Until(h.deadline))
	}
	if !l.reg.opts.keepAlive {
		return
	}
	next := time.Until(sent.Add(length / 3))
	if h.renewal == nil {
		h.renewal = time.AfterFunc(next, func() { l.keepAlive(h) })
	} else {
		h.renewal.Reset(next)
	}
}

// watch closes h's done channel once its deadline has passed.
func (l *lock) watch(h *hold) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cur != h || h.lost {
		return
	}
	if wait := time.Until(h.deadline); wait > 0 { // renewed as the timer fired
		h.watchdog.Reset(wait)
		return
	}
	l.lose(h)
	if l.reg.opts.keepAlive {
		l.reg.report(l.key, l.wrap("keep-alive", errors.New("lease not renewed before its safety margin; Done closed")))
	}
}

// lose closes h's done channel and stops its renewals. l.mu must be held.
func (l *lock) lose(h *hold) {
	if h.lost {
		return
	}
	h.lost = true
	close(h.done)
	if h.renewal != nil {
		h.renewal.Stop()
	}
}

// end finishes h at unlock. l.mu must be held.
func (l *lock) end(h *hold) {
	if h.watchdog != nil {
		h.watchdog.Stop()
	}
	l.lose(h)
}

// keepAlive renews h in the background, retrying failures until the
// lease's deadline, when the watchdog gives up on it. It stops when the
// registry closes.
func (l *lock) keepAlive(h *hold) {
	if !l.reg.startCleanup() {
		return
	}
	defer l.reg.endCleanup()
	l.mu.Lock()
	live, ttl, deadline := l.cur == h && !h.lost, h.ttl, h.deadline
	l.mu.Unlock()
	if !live {
		return
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	bo := newBackoff(l.reg.opts.idle)
	for {
		sent := time.Now()
		err := l.reg.repo.Renew(ctx, l.key, ttl)
		if err == nil || errors.Is(err, ErrLockLost) || ctx.Err() != nil {
			if err != nil && l.current(h) {
				l.reg.report(l.key, l.wrap("keep-alive", err))
			}
			l.renewed(h, ttl, sent, err)
			return
		}
		if !l.current(h) {
			return
		}
		l.reg.report(l.key, l.wrap("keep-alive (retrying)", err))
		t := time.NewTimer(bo.next())
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return // the watchdog closes done
		case <-l.reg.done:
			t.Stop()
			return
		}
	}
}

func (l *lock) current(h *hold) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cur == h
}

func (h *lock) Token() int64 {
	l := h.reg.holder(h.key)
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cur == nil {
		return 0
	}
	return l.cur.token
}

func (h *lock) Done() <-chan struct{} {
	l := h.reg.holder(h.key)
	if l == nil {
		return closedChan
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cur == nil {
		return closedChan
	}
	return l.cur.done
}

// retry runs a release or renewal of hold h, retrying transient errors with
// backoff until ctx is done or the lease has run out its TTL, after which a
// retry could no longer matter.
func (l *lock) retry(ctx context.Context, op string, h *hold, call func(context.Context) error) error {
	l.mu.Lock()
	ttl, expiry := h.ttl, h.expiry
	l.mu.Unlock()
	bo := newBackoff(l.reg.opts.idle)
	for {
		_, err := l.attempt(ctx, ttl, func(ctx context.Context) (bool, error) {
			return false, call(ctx)
		})
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil || !errors.Is(err, ErrTransient):
			return l.wrap(op, err)
		}
		delay := bo.next()
		if time.Until(expiry) < delay {
			return l.wrap(op, fmt.Errorf("gave up as the lease expired: %w", err))
		}
		l.reg.report(l.key, l.wrap(op+" (retrying)", err))
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return l.wrap(op, ctx.Err())
		}
	}
}

func (h *lock) wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("registry: %s %q: %w", op, shortKey(h.key), err)
}

// shortKey keeps errors about huge keys readable.
func shortKey(key string) string {
	const max = 128
	if len(key) <= max {
		return key
	}
	return fmt.Sprintf("%s...(%d bytes)", key[:max], len(key))
}

package registry

import (
	"context"
	"sync"
	"time"
)

// keyState is what a registry knows of one key: the local primitive that
// the key's goroutines in this process queue on, and the current hold. The
// registry keeps one per key, in its active map while a goroutine holds or
// waits for the key, and in its idle cache otherwise.
type keyState struct {
	reg    *Registry
	key    string
	handle *lockHandle // what Obtain returns for the key

	// Guarded by reg.mu.
	refs       int // waiters plus the holder
	lastUsed   time.Time
	prev, next *keyState // in the idle cache's list, while idle

	// sem holds one token while a goroutine of this process owns the key
	// locally; only the owner talks to the repository, so local waiters
	// never touch the database.
	sem chan struct{}

	mu  sync.Mutex // guards cur and cleaning
	cur *hold      // the current hold, nil when not held
	// watchdog closes the current hold's done at its deadline (see
	// hold.watch): one timer for all the holds of the key, made by its
	// first hold, so that a hold costs no timer of its own. It is set
	// under mu and the hold's mu, and reset and stopped only under the
	// current hold's mu.
	watchdog *time.Timer
	// cleaning, while not nil, says that sem's token is held by the
	// clean-up of an abandoned attempt, not by a holder or a taker; it is
	// closed when the clean-up gives the token back. Giving it back and
	// clearing cleaning happen together under mu.
	cleaning chan struct{}

	// contended says the key's last acquisition in this process found the
	// lease held elsewhere, so the next one that waits subscribes to
	// releases before its first attempt (see acquisition.subscribe).
	// Guarded by sem's token.
	contended bool
}

func newKeyState(l *lockHandle) *keyState {
	return &keyState{reg: l.reg, key: l.key, handle: l, lastUsed: time.Now(), sem: make(chan struct{}, 1)}
}

// takeLocal waits for the key's local primitive as mode allows. A single
// attempt (waitNever) still waits for the clean-up of an abandoned attempt,
// which is no holder, so that it reports the key's real state: what the
// repository says, not "held" because a failed call is tidying up.
func (k *keyState) takeLocal(ctx context.Context, mode waitMode) (bool, error) {
	for {
		ok, cleaning := k.tryLocal()
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
		case <-k.reg.done:
			return false, ErrClosed
		}
	}
	select {
	case k.sem <- struct{}{}:
		return true, nil
	case <-ctx.Done():
		return false, deadlineIsNotError(ctx, mode)
	case <-k.reg.done:
		return false, ErrClosed
	}
}

// tryLocal takes the local primitive if it is free; if not, it returns the
// pending clean-up that holds it, if any.
func (k *keyState) tryLocal() (bool, <-chan struct{}) {
	k.mu.Lock()
	defer k.mu.Unlock()
	select {
	case k.sem <- struct{}{}:
		return true, nil
	default:
		return false, k.cleaning
	}
}

// releaseLocal gives up the local primitive and the registry pin.
func (k *keyState) releaseLocal() {
	<-k.sem
	k.reg.unpin(k)
}

// startCleaning marks the local primitive, which the caller holds, as held
// by a clean-up from now on.
func (k *keyState) startCleaning() {
	k.mu.Lock()
	k.cleaning = make(chan struct{})
	k.mu.Unlock()
}

// endCleaning gives up the local primitive that a clean-up held, and the
// registry pin.
func (k *keyState) endCleaning() {
	k.mu.Lock()
	<-k.sem
	close(k.cleaning)
	k.cleaning = nil
	k.mu.Unlock()
	k.reg.unpin(k)
}

// current returns the current hold, nil when the key is not held.
func (k *keyState) current() *hold {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.cur
}

// setCurrent records the hold of lease, just taken for ttl by a statement
// sent at sent by the acquisition of ctx, as the current hold, and arms
// its watchdog: both under mu, so that a watchdog that fires at once
// (the lease came back with less than its safety margin) finds the hold.
func (k *keyState) setCurrent(ctx context.Context, lease Lease, ttl time.Duration, sent time.Time) {
	h := newHold(ctx, k, lease, ttl)
	length := ttl
	if lease.TTL > 0 { // a lease handed over lasts only what remained of it
		length = lease.TTL
	}
	k.mu.Lock()
	k.cur = h
	h.mu.Lock()
	h.arm(sent, length)
	h.mu.Unlock()
	k.mu.Unlock()
}

// watch is the watchdog's function: it lets the current hold, if any,
// check its deadline. A firing meant for an earlier hold finds a later
// hold whose deadline has not passed, or none.
func (k *keyState) watch() {
	if h := k.current(); h != nil {
		h.watch()
	}
}

// unhold ends the current hold and returns it, or returns nil if the key
// is not held; of concurrent calls, only one gets the hold.
func (k *keyState) unhold() *hold {
	k.mu.Lock()
	defer k.mu.Unlock()
	h := k.cur
	k.cur = nil
	if h != nil {
		h.end()
	}
	return h
}

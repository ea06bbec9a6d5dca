package grouphandler

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/lockreg/lockreg/groupstore"
)

// WithLock runs work on group key under the group lock, waiting for the
// lock at most Settings.LockTimeout, and returns work's error, or an error
// wrapping Errors.LockTimeout if the lock was not taken in time.
//
// Where the store locks groups itself (Core.locker), the lock is the
// store's: work runs in a Locked call, and the Core's store calls on
// work's context run in its transaction; the group's row lock is held
// until it commits, and its wait is bounded only by ctx (a row lock lasts
// one transaction, not a lease, so a dead holder's ends with its
// connection). Otherwise it is a registry lease:
//
// The hold is watched ([registry.Lock.Done]): once it ends or may have
// ended, the Core's methods publish and record nothing more (they check
// before each step), the context work gets ends with cause
// Errors.LockLost within watchTick (canceling calls in flight), and
// WithLock marks work's error as caused by the lost lock. The watch costs
// no goroutine per hold: one per Core polls the holds in progress (see
// watcher).
//
// What work defers with AfterUnlock runs after the unlock.
func (c *Core) WithLock(ctx context.Context, key string, work func(context.Context) error) error {
	return thenDeferred(ctx, func(ctx context.Context) error { return c.withLock(ctx, key, c.s.LockTimeout, work) })
}

// withLock is WithLock with a wait of its own.
func (c *Core) withLock(ctx context.Context, key string, wait time.Duration, work func(context.Context) error) error {
	groupSpan(ctx, key)
	if c.locker != nil {
		return c.locker.Locked(ctx, key, func(tctx context.Context, tx groupstore.Store) error {
			return work(context.WithValue(tctx, txKey{}, tx))
		})
	}
	l := c.s.Locks.Obtain(c.s.LockPrefix + key)
	wctx, cancel := context.WithTimeout(ctx, wait)
	ok, err := l.TryLockContext(wctx)
	cancel()
	if err != nil {
		return fmt.Errorf("%s: locking group %q: %w", c.kind.Name, key, err)
	}
	if !ok {
		return fmt.Errorf("%w: group %q after %v", c.kind.Errors.LockTimeout, key, wait)
	}
	defer func() {
		// The message context ends with its ack; the unlock must outlive it.
		if err := l.UnlockContext(context.WithoutCancel(ctx)); err != nil {
			c.logger.Error("Unlocking group failed; another instance may have changed it", err,
				watermill.LogFields{"group": key})
		}
	}()
	h := &hold{done: l.Done(), cause: c.kind.Errors.LockLost}
	h.Context, h.cancel = context.WithCancelCause(ctx)
	defer h.cancel(nil)
	c.watch.add(h)
	err = work(h)
	c.watch.remove(h)
	if err != nil && h.lost() && !errors.Is(err, h.cause) {
		err = fmt.Errorf("%w: %w", h.cause, err)
	}
	return err
}

// txKey is the context key of the store of a Locked call (see WithLock).
type txKey struct{}

// store returns the store to call on ctx: that of the Locked call ctx is
// in, if any, so that the call runs in its transaction, else the
// handler's.
func (c *Core) store(ctx context.Context) groupstore.Store {
	if tx, ok := ctx.Value(txKey{}).(groupstore.Store); ok {
		return tx
	}
	return c.s.Store
}

// hold is the context of work under a group lock: a child of the caller's
// context that the watcher ends, with cause Errors.LockLost, once the
// lock's hold ends or may have ended.
type hold struct {
	context.Context
	cancel context.CancelCauseFunc
	done   <-chan struct{} // the lock's Done
	cause  error           // Errors.LockLost
}

// holdKey is the context key under which a hold finds itself, also from
// contexts derived from it.
type holdKey struct{}

func (h *hold) Value(key any) any {
	if key == (holdKey{}) {
		return h
	}
	return h.Context.Value(key)
}

// lost reports whether the hold has ended or may have ended.
func (h *hold) lost() bool {
	select {
	case <-h.done:
		return true
	default:
		return false
	}
}

// holdErr returns why work on ctx must stop: Errors.LockLost once the hold
// of the group lock it runs under may be gone, the context's cause once it
// is done otherwise, and nil while both last. The Core checks it before it
// publishes, so that nothing goes out without the lock, and it sees a lost
// hold at once, not a watchTick later.
func holdErr(ctx context.Context) error {
	if h, ok := ctx.Value(holdKey{}).(*hold); ok && h.lost() {
		return h.cause
	}
	return context.Cause(ctx)
}

// watchTick is how often a watcher looks at the holds in progress: the
// longest a lost hold's calls in flight go on before they are canceled.
const watchTick = 10 * time.Millisecond

// watcher ends the context of every hold in progress whose lock's hold
// ended. A goroutine per hold, selecting on its Done, costs more CPU than
// the whole work of an in-memory handler, so one goroutine per Core polls
// instead. It runs while holds are in progress and stops at the first tick
// that finds none; add starts it again.
type watcher struct {
	mu      sync.Mutex
	holds   map[*hold]struct{}
	running bool
}

// add watches h until remove.
func (w *watcher) add(h *hold) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.holds == nil {
		w.holds = make(map[*hold]struct{})
	}
	w.holds[h] = struct{}{}
	if !w.running {
		w.running = true
		go w.run()
	}
}

// remove stops watching h.
func (w *watcher) remove(h *hold) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.holds, h)
}

// run polls the holds every watchTick until it finds none.
func (w *watcher) run() {
	t := time.NewTicker(watchTick)
	defer t.Stop()
	for range t.C {
		w.mu.Lock()
		if len(w.holds) == 0 {
			w.running = false
			w.mu.Unlock()
			return
		}
		for h := range w.holds {
			if h.lost() {
				h.cancel(h.cause)
			}
		}
		w.mu.Unlock()
	}
}

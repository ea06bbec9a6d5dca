package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockreg/lockreg/internal/backoff"
	"github.com/lockreg/lockreg/registry"
)

// Waking waiters, as etcd's concurrency.Mutex waits: a waiter watches
// only the entry just before its own by create revision (its
// predecessor), from the revision at which it read it, for its deletion;
// then it looks again. When it has no predecessor left, its entry holds
// the lock and the waiter is woken. A release thus wakes exactly the next
// waiter, whichever process it is in, and no other: no thundering herd.

// Retries of a watch that failed: the delay doubles up to watchMaxDelay,
// with jitter; readTimeout bounds each read of a predecessor.
const (
	watchMinDelay = 100 * time.Millisecond
	watchMaxDelay = 5 * time.Second
	readTimeout   = 5 * time.Second
)

// notifier runs the watches of a repository's waiters, one goroutine per
// Notify subscription, until stopped.
type notifier struct {
	r      *Repository
	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	stopped bool
	down    error // why the last read or watch failed, until one succeeds
	wg      sync.WaitGroup
}

func newNotifier(r *Repository) *notifier {
	ctx, cancel := context.WithCancel(context.Background())
	return &notifier{r: r, ctx: ctx, cancel: cancel}
}

// Notify arranges for c to receive a value, sent without blocking, when
// this client's entry in key's queue (see AcquireOrWait) has become the
// first, because the entries before it were released or expired; also
// when its entry is gone, and after a watch failed, since a release may
// then go unseen; until stop is called. Each call starts a goroutine that
// reads the predecessor of this client's entry (one range read) and
// watches it, on the client's shared watch stream, and that stop ends.
// After Close it does nothing.
func (r *Repository) Notify(key string, c chan<- struct{}) (stop func()) {
	n := r.ears
	n.mu.Lock()
	if n.stopped {
		n.mu.Unlock()
		return func() {}
	}
	ctx, cancel := context.WithCancel(n.ctx)
	n.wg.Add(1)
	n.mu.Unlock()
	r.mu.Lock()
	h := r.locks[key]
	if h == nil {
		h = new(holding)
		r.locks[key] = h
	}
	h.watchers++
	r.mu.Unlock()
	go func() {
		defer n.wg.Done()
		n.watch(ctx, key, h, c)
		r.mu.Lock()
		h.watchers--
		r.forget(key, h)
		r.mu.Unlock()
	}()
	return cancel
}

func wake(c chan<- struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// watch wakes c whenever the entry of h has no predecessor left, until
// ctx is done.
func (n *notifier) watch(ctx context.Context, key string, h *holding, c chan<- struct{}) {
	r := n.r
	bo := backoff.New(watchMinDelay, watchMaxDelay)
	for ctx.Err() == nil {
		r.mu.Lock()
		e := h.e
		if h.changed == nil {
			h.changed = make(chan struct{})
		}
		changed := h.changed
		r.mu.Unlock()
		if e == nil { // not queued yet: AcquireOrWait will write the entry
			select {
			case <-changed:
			case <-ctx.Done():
			}
			continue
		}
		err := n.turn(ctx, e, changed, c)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			n.setDown(err)
			r.cfg.tel.watchFailed()
			wait := bo.Next()
			r.cfg.onError(fmt.Errorf("%s: watching for the release of the entry before this client's failed (again in %v): %w",
				opKey("wait", key), wait.Round(time.Millisecond), err))
			wake(c) // a release may go unseen: the waiter asks
			backoff.Sleep(ctx, wait, nil)
			continue
		}
		n.setDown(nil)
		bo.Reset()
	}
}

// turn reads the predecessor of e and waits for its deletion, or wakes c
// at once when there is none; it returns when the predecessor is deleted,
// when e is replaced (changed closes) or when ctx is done.
func (n *notifier) turn(ctx context.Context, e *entry, changed <-chan struct{}, c chan<- struct{}) error {
	r := n.r
	rctx, cancel := context.WithTimeout(ctx, readTimeout)
	start := time.Now()
	resp, err := r.c.Get(rctx, e.n.dir, append(clientv3.WithLastCreate(), clientv3.WithMaxCreateRev(e.rev-1))...)
	r.cfg.tel.request("read", start, err)
	cancel()
	if err != nil {
		return err
	}
	if len(resp.Kvs) == 0 { // the first: a hand-off (or the entry is gone)
		n.setDown(nil)
		wake(c)
		select {
		case <-changed:
		case <-ctx.Done():
		}
		return nil
	}
	// WithRequireLeader: a member cut off from the leader ends the watch
	// with an error instead of keeping it open in silence.
	wctx, stop := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer stop()
	wch := r.c.Watch(wctx, string(resp.Kvs[0].Key), clientv3.WithRev(resp.Header.Revision+1), clientv3.WithFilterPut())
	for {
		select {
		case <-changed:
			return nil
		case wr, ok := <-wch:
			if !ok {
				if err := ctx.Err(); err != nil {
					return err
				}
				return errors.New("the watch closed")
			}
			if err := wr.Err(); err != nil {
				return err
			}
			for _, ev := range wr.Events {
				if ev.Type == mvccpb.DELETE {
					return nil
				}
			}
		}
	}
}

func (n *notifier) setDown(err error) {
	n.mu.Lock()
	n.down = err
	n.mu.Unlock()
}

// stop ends every watch and waits for its goroutine.
func (n *notifier) stop() {
	n.mu.Lock()
	n.stopped = true
	n.cancel()
	n.mu.Unlock()
	n.wg.Wait()
}

// check returns an error wrapping registry.ErrListenerDown while the last
// read or watch of a waiter failed.
func (n *notifier) check() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.down == nil || n.stopped {
		return nil
	}
	return fmt.Errorf("%w: %w", registry.ErrListenerDown, n.down)
}

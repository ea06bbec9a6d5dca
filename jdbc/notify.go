package jdbc

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockreg/lockreg/internal/backoff"
	"github.com/lockreg/lockreg/registry"
)

// Listener receives PostgreSQL notifications for a LockRepository; see
// WithListener. Package pgxlisten provides one for the pgx driver and
// package pqlisten one for lib/pq.
//
// A Listener may also have a method Check(ctx context.Context) error that
// returns why it cannot work (with the database it was made for, say);
// NewLockRepository calls it and refuses the listener, with an error
// wrapping ErrInvalidOption, if it returns an error.
type Listener interface {
	// Listen executes LISTEN channel on a connection of its own, calls
	// ready once it listens, and then calls notify with the payload of
	// every notification on channel, until ctx is done or the connection
	// fails; it returns the error that ended it, also when it cannot
	// connect (the repository retries with backoff). After a reconnection
	// of its own it calls ready again, since notifications sent meanwhile
	// are lost.
	Listen(ctx context.Context, channel string, ready func(), notify func(payload string)) error
}

// listenerCheck is the optional method of a Listener (see there); the
// listeners of packages pgxlisten and pqlisten have it.
type listenerCheck interface {
	Check(ctx context.Context) error
}

// Reconnection backoff of the listener: the delay doubles after each failed
// session up to listenMaxDelay, with jitter, and starts over after a session
// that listened for at least listenMaxDelay. A listener that fails right
// after it listens thus backs off too, instead of reconnecting in a loop.
const (
	listenMinDelay = 100 * time.Millisecond
	listenMaxDelay = 30 * time.Second
)

// listenerHub dispatches a repository's notifications to the registries'
// waiters. Its goroutine starts with the first waiter and stops at Close.
type listenerHub struct {
	l        Listener
	channel  string
	clientID string // this client: announcements of hand-offs to others are not for us
	onError  func(error)
	tel      *repoTel // counts reconnections; nil without instruments
	// handed, if set, hears of each hand-off to this client that an
	// announcement tells of (its held-set key, token and lease
	// microseconds), before the waiter is woken.
	handed func(lockKey string, token, micros int64)
	// sleep waits d or until ctx is done, reporting whether d passed; tests
	// replace it before the listener starts.
	sleep func(ctx context.Context, d time.Duration) bool

	mu      sync.Mutex
	subs    map[string]map[chan<- struct{}]struct{} // by LOCK_KEY
	down    error                                   // why the last session ended, until the next one listens
	started bool
	stopped bool
	cancel  context.CancelFunc
	done    chan struct{}
}

func newListenerHub(l Listener, channel, clientID string, onError func(error)) *listenerHub {
	return &listenerHub{l: l, channel: channel, clientID: clientID, onError: onError, sleep: sleep,
		subs: make(map[string]map[chan<- struct{}]struct{})}
}

func sleep(ctx context.Context, d time.Duration) bool { return backoff.Sleep(ctx, d, nil) }

// Notify arranges for c to receive a value, sent without blocking, when
// another client releases key and hands it to this one, and after the
// listening connection was re-established (announcements may have been lost
// meanwhile), until stop is called. Without WithListener it does nothing.
// The first call starts the listener.
func (r *LockRepository) Notify(key string, c chan<- struct{}) (stop func()) {
	lk, err := r.lockKey(key)
	if r.listeners == nil || err != nil {
		return func() {}
	}
	return r.listeners.subscribe(heldKey(lk), c)
}

var _ registry.Notifier = (*LockRepository)(nil)

func (e *listenerHub) subscribe(lockKey string, c chan<- struct{}) (stop func()) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopped {
		return func() {}
	}
	if e.subs[lockKey] == nil {
		e.subs[lockKey] = make(map[chan<- struct{}]struct{})
	}
	e.subs[lockKey][c] = struct{}{}
	if !e.started {
		e.started = true
		ctx, cancel := context.WithCancel(context.Background())
		e.cancel, e.done = cancel, make(chan struct{})
		go e.run(ctx)
	}
	return func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		delete(e.subs[lockKey], c)
		if len(e.subs[lockKey]) == 0 {
			delete(e.subs, lockKey)
		}
	}
}

// run listens until stopped, reconnecting after failures with capped,
// jittered exponential backoff (see listenMinDelay), reporting each failure
// once, and wakes every waiter after each (re)connection.
func (e *listenerHub) run(ctx context.Context) {
	defer close(e.done)
	bo := backoff.New(listenMinDelay, listenMaxDelay)
	for {
		var listening atomic.Pointer[time.Time] // when the session last became ready
		err := e.l.Listen(ctx, e.channel, func() {
			now := time.Now()
			listening.Store(&now)
			e.setDown(nil)
			e.wakeAll()
		}, e.wake)
		if ctx.Err() != nil {
			return
		}
		e.setDown(err)
		if t := listening.Load(); t != nil && time.Since(*t) >= listenMaxDelay {
			bo.Reset() // a working session ended: start over
		}
		wait := bo.Next()
		e.tel.reconnect()
		e.onError(fmt.Errorf("jdbc: listening for released locks on %s failed (reconnecting in %v): %w",
			e.channel, wait.Round(time.Millisecond), err))
		e.wakeAll()
		if !e.sleep(ctx, wait) {
			return
		}
	}
}

// wake passes on an announcement: "LOCK_KEY", or "LOCK_KEY CLIENT_ID"
// when a release handed the lease to CLIENT_ID, which is then the only
// waiter to wake, followed (since lockreg's hand-offs carried their
// lease) by chr(31), the token, chr(31) and the lease's microseconds. A
// LOCK_KEY (WithKeyMapping) and a client id may hold spaces, so every
// reading of the payload that names a key waited for here counts: a
// wake-up is a hint, and a spurious one costs one try. A hand-off's lease
// is passed on only to a wait whose latest queue statement found a lower
// token (waitQueue.handedByAnnouncement).
func (e *listenerHub) wake(payload string) {
	payload, token, micros := cutLease(payload)
	e.mu.Lock()
	defer e.mu.Unlock()
	e.wakeKey(payload)
	for i := strings.IndexByte(payload, ' '); i >= 0; {
		if strings.TrimSpace(payload[i+1:]) == e.clientID {
			if token > 0 && e.handed != nil {
				e.handed(heldKey(payload[:i]), token, micros)
			}
			e.wakeKey(payload[:i])
		}
		j := strings.IndexByte(payload[i+1:], ' ')
		if j < 0 {
			break
		}
		i += 1 + j
	}
}

// cutLease splits a hand-off's token and lease microseconds off an
// announcement; token is 0 when it carries none (an announcement of the
// key alone, or one from a release of an earlier version).
func cutLease(payload string) (rest string, token, micros int64) {
	i := strings.LastIndexByte(payload, 31)
	if i < 0 {
		return payload, 0, 0
	}
	j := strings.LastIndexByte(payload[:i], 31)
	if j < 0 {
		return payload, 0, 0
	}
	t, err1 := strconv.ParseInt(payload[j+1:i], 10, 64)
	m, err2 := strconv.ParseInt(payload[i+1:], 10, 64)
	if err1 != nil || err2 != nil || t <= 0 || m <= 0 {
		return payload, 0, 0
	}
	return payload[:j], t, m
}

// wakeKey wakes the waiters of lockKey (trailing blanks of a CHAR column
// ignored); e.mu is held.
func (e *listenerHub) wakeKey(lockKey string) {
	for c := range e.subs[strings.TrimRight(lockKey, " ")] {
		select {
		case c <- struct{}{}:
		default:
		}
	}
}

func (e *listenerHub) wakeAll() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, cs := range e.subs {
		for c := range cs {
			select {
			case c <- struct{}{}:
			default:
			}
		}
	}
}

// setDown records why the listener is not listening, or nil once it is.
func (e *listenerHub) setDown(err error) {
	e.mu.Lock()
	e.down = err
	e.mu.Unlock()
}

// check returns an error wrapping registry.ErrListenerDown while the
// listener, once started, has lost its connection and not listened since.
func (e *listenerHub) check() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.down == nil || e.stopped {
		return nil
	}
	return fmt.Errorf("%w: %s: %w", registry.ErrListenerDown, e.channel, e.down)
}

// stop ends the listener and waits for its goroutine.
func (e *listenerHub) stop() {
	e.mu.Lock()
	e.stopped = true
	started := e.started
	e.mu.Unlock()
	if started {
		e.cancel()
		<-e.done
	}
}

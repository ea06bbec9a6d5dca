package redislock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockreg/lockreg/internal/backoff"
	"github.com/lockreg/lockreg/registry"
)

// Reconnection of the pub/sub connection: the delay doubles after each
// failed session up to listenMaxDelay, with jitter (internal/backoff), and
// starts over after a session that listened for at least listenMaxDelay.
// A connection that fails right after it subscribed thus backs off too.
const (
	listenMinDelay = 100 * time.Millisecond
	listenMaxDelay = 30 * time.Second
)

// healthInterval is how long the connection may stay silent before it is
// pinged; a ping unanswered for as long again ends the session, so that a
// connection cut without a reset (a partition) is noticed.
const healthInterval = 5 * time.Second

// listener dispatches a repository's announcements to the registry's
// waiters. Its goroutine starts with the first waiter and stops at Close.
type listener struct {
	c       redis.UniversalClient
	channel string
	me      string // this client: announcements of hand-offs to others are not for us
	onError func(error)
	tel     *repoTel // counts failed sessions; nil without instruments

	mu      sync.Mutex
	subs    map[string]map[chan<- struct{}]struct{} // by announcement
	down    error                                   // why the last session ended, until the next one subscribes
	started bool
	stopped bool
	ps      *redis.PubSub // the current session's; nil between sessions
	cancel  context.CancelFunc
	done    chan struct{} // closed when the goroutine ends
}

func newListener(c redis.UniversalClient, channel, me string, onError func(error), t *repoTel) *listener {
	return &listener{c: c, channel: channel, me: me, onError: onError, tel: t, subs: make(map[string]map[chan<- struct{}]struct{})}
}

func (l *listener) subscribe(ann string, c chan<- struct{}) (stop func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped {
		return func() {}
	}
	if l.subs[ann] == nil {
		l.subs[ann] = make(map[chan<- struct{}]struct{})
	}
	l.subs[ann][c] = struct{}{}
	if !l.started {
		l.started = true
		var ctx context.Context
		ctx, l.cancel = context.WithCancel(context.Background())
		l.done = make(chan struct{})
		go l.run(ctx)
	}
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		delete(l.subs[ann], c)
		if len(l.subs[ann]) == 0 {
			delete(l.subs, ann)
		}
	}
}

// run listens until stopped, one session after another, reporting each
// failure and waking every waiter after it, since announcements may have
// been lost.
func (l *listener) run(ctx context.Context) {
	defer close(l.done)
	bo := backoff.New(listenMinDelay, listenMaxDelay)
	for {
		var ready time.Time // when the session subscribed
		err := l.session(ctx, &ready)
		if ctx.Err() != nil {
			return
		}
		l.setDown(err)
		if !ready.IsZero() && time.Since(ready) >= listenMaxDelay {
			bo.Reset() // a working session ended: start over
		}
		wait := bo.Next()
		l.tel.reconnect()
		l.onError(fmt.Errorf("redislock: listening for released locks on %s failed (reconnecting in %v): %w",
			l.channel, wait.Round(time.Millisecond), err))
		l.wakeAll()
		if !backoff.Sleep(ctx, wait, nil) {
			return
		}
	}
}

// session subscribes on a connection of its own and dispatches what it
// hears until the connection fails or stop closes it, and returns why it
// ended.
func (l *listener) session(ctx context.Context, ready *time.Time) error {
	ps := l.c.Subscribe(ctx) // connects with the subscription below
	l.mu.Lock()
	if l.stopped {
		l.mu.Unlock()
		ps.Close()
		return nil
	}
	l.ps = ps
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		l.ps = nil
		l.mu.Unlock()
		ps.Close()
	}()
	if err := ps.Subscribe(ctx, l.channel); err != nil {
		return err
	}
	pinged := false
	for {
		msg, err := ps.ReceiveTimeout(ctx, healthInterval)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() && !pinged && ctx.Err() == nil {
				if err := ps.Ping(ctx); err != nil {
					return err
				}
				pinged = true
				continue
			}
			if pinged {
				err = fmt.Errorf("no answer to a ping within %v: %w", healthInterval, err)
			}
			return err
		}
		pinged = false // anything heard proves the connection alive
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				*ready = time.Now()
				l.setDown(nil)
				l.wakeAll() // releases before the subscription went unheard
			}
		case *redis.Message:
			l.wake(m.Payload)
		}
	}
}

// wake passes on an announcement: "ANNOUNCEMENT CLIENT-ID" when a release
// handed the lease to CLIENT-ID, which is then the only client to wake.
func (l *listener) wake(payload string) {
	ann, to, _ := strings.Cut(payload, " ")
	if to != "" && to != l.me {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for c := range l.subs[ann] {
		select {
		case c <- struct{}{}:
		default:
		}
	}
}

func (l *listener) wakeAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, cs := range l.subs {
		for c := range cs {
			select {
			case c <- struct{}{}:
			default:
			}
		}
	}
}

// stop ends the listener and waits for its goroutine.
func (l *listener) stop() {
	l.mu.Lock()
	l.stopped = true
	started, ps := l.started, l.ps
	if started {
		l.cancel()
	}
	l.mu.Unlock()
	if ps != nil {
		ps.Close() // interrupts a blocked read
	}
	if started {
		<-l.done
	}
}

// setDown records why the listener is not subscribed, or nil once it is.
func (l *listener) setDown(err error) {
	l.mu.Lock()
	l.down = err
	l.mu.Unlock()
}

// check returns an error wrapping registry.ErrListenerDown while the
// listener, once started, has lost its connection and not subscribed since.
func (l *listener) check() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.down == nil || l.stopped {
		return nil
	}
	return fmt.Errorf("%w: %s: %w", registry.ErrListenerDown, l.channel, l.down)
}

package lockmw

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/lockreg/lockreg/registry"
)

// PerKey returns a middleware that runs the handler for a message only
// while it holds the lock of the message's key in locks: messages of one
// key run one at a time across every instance that shares the registry's
// lock table, messages of different keys in parallel.
//
// For each message it derives the key with key, takes the lock of the
// key's lock key (the prefix, [DefaultPrefix], and the key), waiting at
// most the lock timeout, runs the handler with a message context that
// carries the hold's fencing token ([Token]) and is cancelled, with a
// cause wrapping [ErrLockLost], when the hold ends or may have ended,
// renews the lease every third of its TTL while the handler runs, and
// unlocks when the handler returns or panics. The message's own context
// is put back before the middleware returns, so a Retry middleware outside
// gives each attempt a context that is not cancelled.
//
// It returns an error, and no messages, without running the handler when
// the message has no key ([ErrNoKey]; see [WithMissingKey]) or the lock
// was not acquired in time ([ErrLockTimeout]), and also when the lock
// could not be taken for another reason (the message's context ended, the
// registry closed, a repository error), wrapping that error. It returns
// an error wrapping [ErrLockLost], and the handler's error if any, when
// the hold ended before the handler returned or the unlock found the lease
// lost: such a run is nacked, never acked, because its work may have
// overlapped another holder's. Otherwise it returns what the handler
// returned. An unlock that fails otherwise (the lease then expires on its
// own after its TTL) is logged and does not change the result.
//
// Each message costs one lock cycle: one acquisition and one release
// statement with a jdbc repository (none with registry.NewLocal), plus one
// renewal per third of the TTL that the handler runs. With a registry made
// with registry.WithKeepAlive the registry renews the same leases too;
// that doubles the renewals of long handlers and nothing else.
//
// PerKey returns an error wrapping [ErrInvalidOption] for a nil locks or
// key or an invalid option.
func PerKey(locks registry.LockRegistry, key KeyFunc, opts ...Option) (message.HandlerMiddleware, error) {
	switch {
	case locks == nil:
		return nil, fmt.Errorf("%w: PerKey with a nil registry.LockRegistry", ErrInvalidOption)
	case key == nil:
		return nil, fmt.Errorf("%w: PerKey with a nil KeyFunc", ErrInvalidOption)
	}
	o := defaultOptions()
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	if o.logger == nil {
		var l *slog.Logger // slog's default
		if r, ok := locks.(*registry.Registry); ok {
			l = r.Logger()
		}
		o.logger = watermill.NewSlogLogger(l)
	}
	p := &perKey{options: o, locks: locks, key: key}
	return p.middleware, nil
}

type perKey struct {
	options
	locks registry.LockRegistry
	key   KeyFunc
}

func (p *perKey) middleware(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		key, err := p.key(msg)
		switch {
		case err != nil:
			return nil, fmt.Errorf("%w: message %s: key: %w", ErrNoKey, msg.UUID, err)
		case key != "":
			return p.handle(h, msg, key)
		case p.missing == RunWithoutLock:
			return h(msg)
		}
		return nil, fmt.Errorf("%w: message %s", ErrNoKey, msg.UUID)
	}
}

// handle runs h for msg under the lock of key.
func (p *perKey) handle(h message.HandlerFunc, msg *message.Message, key string) (out []*message.Message, err error) {
	orig := msg.Context()
	l := p.locks.Obtain(p.prefix + key)
	if err := p.lock(orig, l, key); err != nil {
		return nil, err
	}
	// Nobody else unlocks this hold, so these are its token and channel.
	token, done := l.Token(), l.Done()
	ctx, cancel := context.WithCancelCause(context.WithValue(orig, tokenKey{}, token))
	stop, kept := make(chan struct{}), make(chan struct{})
	go p.keep(l, key, done, stop, kept, cancel)
	msg.SetContext(ctx)
	defer func() {
		// The keeper stops before the unlock: a renewal after it could
		// renew this key's next hold in this process.
		close(stop)
		<-kept
		lost := isClosed(done) // before the unlock, which closes it
		cancel(context.Canceled)
		msg.SetContext(orig)
		uerr := l.UnlockContext(context.WithoutCancel(orig))
		var lostErr error
		switch {
		case lost:
			lostErr = context.Cause(ctx)
			if !errors.Is(lostErr, ErrLockLost) {
				lostErr = lostError(key, nil) // the keeper had not seen it yet
			}
		case errors.Is(uerr, registry.ErrLockLost):
			lostErr = fmt.Errorf("%w: key %q: the unlock found the lease lost: %w", ErrLockLost, key, uerr)
		case uerr != nil:
			p.logger.Error("Unlocking a key failed; its lease expires after its TTL", uerr,
				watermill.LogFields{"key": key, "message_uuid": msg.UUID})
		}
		if lostErr != nil {
			if err != nil {
				lostErr = fmt.Errorf("%w; the handler failed too: %w", lostErr, err)
			}
			out, err = nil, lostErr
		}
	}()
	return h(msg)
}

// lock takes l for key, waiting at most the lock timeout.
func (p *perKey) lock(ctx context.Context, l registry.Lock, key string) error {
	wctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	ok, err := l.TryLockTTL(wctx, p.ttl)
	switch {
	case err != nil:
		return fmt.Errorf("lockmw: lock key %q: %w", key, err)
	case !ok:
		return fmt.Errorf("%w: key %q not acquired within %v", ErrLockTimeout, key, p.timeout)
	}
	return nil
}

// keep renews the hold of l every third of the TTL until stop closes, and
// cancels the handler's context with cause when done closes first. It
// closes kept when it returns.
func (p *perKey) keep(l registry.Lock, key string, done, stop <-chan struct{}, kept chan<- struct{}, cancel context.CancelCauseFunc) {
	defer close(kept)
	every := p.ttl / 3
	t := time.NewTimer(every)
	defer t.Stop()
	var failed error // the last renewal's error
	for {
		select {
		case <-done:
			cancel(lostError(key, failed))
			return
		case <-stop:
			return
		case <-t.C:
		}
		failed = renew(l, done, stop)
		if errors.Is(failed, context.Canceled) {
			failed = nil // cut short by the end of the hold: nothing to tell
		}
		if failed != nil && !errors.Is(failed, registry.ErrLockLost) && !isClosed(done) && !isClosed(stop) {
			p.logger.Error("Renewing a key's lease failed; retrying", failed, watermill.LogFields{"key": key})
		}
		t.Reset(every)
	}
}

// renew renews the hold of l once, giving up when done or stop closes:
// the registry retries transient errors until the lease would expire,
// but by then the hold is over.
func renew(l registry.Lock, done, stop <-chan struct{}) error {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() {
		select {
		case <-done:
		case <-stop:
		case <-ctx.Done():
		}
		cancel()
	})
	return l.Renew(ctx)
}

// lostError is the cause of the end of a hold of key; renewal is the last
// renewal's error, if any.
func lostError(key string, renewal error) error {
	if renewal != nil {
		return fmt.Errorf("%w: key %q: the lease was not renewed in time: %w", ErrLockLost, key, renewal)
	}
	return fmt.Errorf("%w: key %q: the lease was lost or not renewed in time", ErrLockLost, key)
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

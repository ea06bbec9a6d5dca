package leader

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	tel "github.com/lockreg/lockreg/internal/telemetry"
	"github.com/lockreg/lockreg/registry"
)

// A Candidate competes, in one instance, for the leadership of a role
// with the candidates of the same role in other instances: Spring's
// LockRegistryLeaderInitiator. The leader is whoever holds the lease of
// the role's lock, obtained from a [registry.LockRegistry]; the role is
// the lock's key. It is safe for concurrent use.
type Candidate struct {
	lock registry.Lock
	role string
	opts options
	log  *tel.Logger // without an error handler

	stop context.CancelCauseFunc // ends the campaign
	done chan struct{}           // closed when the campaign has ended

	mu      sync.Mutex
	term    *Term         // the current term; nil when not leading
	changed chan struct{} // closed, and replaced, when term or ended changes
	ended   error         // why the candidate stopped competing; nil while it competes
}

// New returns a candidate for role on locks and starts it competing, in a
// goroutine of its own, until [Candidate.Close]; New itself performs no
// I/O.
//
// Leadership is the lease of locks.Obtain(role), taken with the TTL of
// [WithTTL] and renewed every third of it by the candidate (a registry made
// with [registry.WithKeepAlive] renews it too, at the cost of a second
// renewal). Two candidates of a role never lead at once as long as their
// repositories share the lease (the same table and region with package
// jdbc) and each instance has its own client (repository).
//
// New returns an error wrapping [ErrInvalidOption] if locks is nil, role is
// empty or an option is invalid.
func New(locks registry.LockRegistry, role string, opts ...Option) (*Candidate, error) {
	if locks == nil {
		return nil, fmt.Errorf("leader: New with a nil LockRegistry: %w", ErrInvalidOption)
	}
	if role == "" {
		return nil, fmt.Errorf("leader: New with an empty role: %w", ErrInvalidOption)
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
		if r, ok := locks.(*registry.Registry); ok {
			o.logger = r.Logger()
		}
	}
	ctx, stop := context.WithCancelCause(context.Background())
	c := &Candidate{
		log:     tel.NewLogger(o.logger, tel.LogKey, role),
		lock:    locks.Obtain(role),
		role:    role,
		opts:    o,
		stop:    stop,
		done:    make(chan struct{}),
		changed: make(chan struct{}),
	}
	go c.campaign(ctx)
	return c, nil
}

// Role returns the role the candidate competes for.
func (c *Candidate) Role() string { return c.role }

// IsLeader reports whether the candidate leads: whether it has a term that
// has not ended. It performs no I/O. It is false from the moment the
// lease's Done channel closes, which is before the lease can expire.
func (c *Candidate) IsLeader() bool { return c.Term() != nil }

// Term returns the current term, or nil when the candidate does not lead.
func (c *Candidate) Term() *Term {
	c.mu.Lock()
	t := c.term
	c.mu.Unlock()
	if t != nil && t.live() {
		return t
	}
	return nil
}

// Wait waits until the candidate leads and returns its term. It returns an
// error wrapping ctx's error when ctx ends first, [ErrClosed] once the
// candidate is closed, and an error wrapping [registry.ErrClosed] when the
// candidate stopped competing because the registry was closed.
func (c *Candidate) Wait(ctx context.Context) (*Term, error) {
	for {
		c.mu.Lock()
		t, changed, ended := c.term, c.changed, c.ended
		c.mu.Unlock()
		if t != nil && t.live() {
			return t, nil
		}
		if ended != nil {
			return nil, ended
		}
		// A term that ended is cleared soon, which closes changed.
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, fmt.Errorf("leader: wait for %q: %w", c.role, ctx.Err())
		}
	}
}

// Yield ends the current term, as [Term.Yield] does, and returns at once.
// It returns an error wrapping [ErrNotLeader] if the candidate does not
// lead.
func (c *Candidate) Yield() error {
	t := c.Term()
	if t == nil {
		return fmt.Errorf("leader: yield %q: %w", c.role, ErrNotLeader)
	}
	t.Yield()
	return nil
}

// Close stops the candidate: it stops competing, ends the current term (its
// context is cancelled with [ErrClosed]), waits for the callbacks to
// return and releases the lease, so that another candidate may lead at
// once. Close waits for all that, and for the candidate's goroutines to
// end, until ctx is done, and then returns ctx's error, wrapped; a later
// Close waits again. Called from a callback, which it waits for, it
// returns only when ctx ends. Errors of the release go to the error
// handler. It does not close the registry, which should be closed after
// its candidates.
func (c *Candidate) Close(ctx context.Context) error {
	c.mu.Lock()
	if c.ended == nil {
		c.setEnded(ErrClosed)
	}
	c.mu.Unlock()
	c.stop(ErrClosed)
	select {
	case <-c.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("leader: close %q: %w", c.role, ctx.Err())
	}
}

// setEnded records why the candidate stopped competing. c.mu must be held.
func (c *Candidate) setEnded(err error) {
	c.ended = err
	close(c.changed)
	c.changed = make(chan struct{})
}

func (c *Candidate) setTerm(t *Term) {
	c.mu.Lock()
	c.term = t
	close(c.changed)
	c.changed = make(chan struct{})
	c.mu.Unlock()
}

// campaign competes for the lease until ctx ends or the registry closes:
// it waits for the lease in the registry, leads a term while it holds it,
// and pauses after each term and each failed attempt.
func (c *Candidate) campaign(ctx context.Context) {
	defer close(c.done)
	for {
		err := c.lock.LockTTL(ctx, c.opts.ttl)
		switch {
		case err == nil && ctx.Err() != nil:
			c.unlock(nil) // taken as Close came: never granted
			return
		case err == nil:
			c.lead(ctx)
		case ctx.Err() != nil:
			return
		case errors.Is(err, registry.ErrClosed):
			err = fmt.Errorf("leader: %q stopped competing: %w", c.role, err)
			c.mu.Lock()
			if c.ended == nil {
				c.setEnded(err)
			}
			c.mu.Unlock()
			c.report(err)
			return
		default:
			c.reportRepeated("compete", fmt.Errorf("leader: competing for %q (trying again in %v): %w", c.role, c.opts.busyWait, err))
		}
		t := time.NewTimer(c.opts.busyWait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
	}
}

// lead runs one term on the lease just taken: it grants the term, renews
// the lease until the term ends, revokes the term and releases the lease.
func (c *Candidate) lead(ctx context.Context) {
	tctx, cancel := context.WithCancelCause(ctx)
	t := &Term{role: c.role, token: c.lock.Token(), lease: c.lock.Done(), ctx: tctx, cancel: cancel}
	// The watcher ends the term when the lease's Done closes, even while
	// this goroutine waits on a renewal.
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-t.lease:
			cancel(fmt.Errorf("leader: the lease of %q was lost or not renewed in time: %w", c.role, registry.ErrLockLost))
		case <-tctx.Done():
		}
	}()
	c.setTerm(t)
	granted := make(chan struct{})
	if f := c.opts.onGranted; f != nil {
		go func() {
			defer close(granted)
			f(t)
		}()
	} else {
		close(granted)
	}

	c.keep(t)
	<-watched
	c.setTerm(nil)
	<-granted
	if f := c.opts.onRevoked; f != nil {
		f(t)
	}
	c.unlock(t)
}

// keep renews the term's lease until the term ends: at once, since a lease
// handed over by a release may have less than the TTL left, and then every
// third of the TTL. Renew retries transient errors itself; other errors,
// short of a lost lease, are retried here until the lease's Done closes.
func (c *Candidate) keep(t *Term) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-t.ctx.Done():
			return
		case <-timer.C:
		}
		next := c.opts.ttl / 3
		err := c.lock.Renew(t.ctx)
		switch {
		case err == nil:
		case t.ctx.Err() != nil:
			return
		case errors.Is(err, registry.ErrLockLost):
			t.cancel(fmt.Errorf("leader: renewal of %q: %w", c.role, err))
			return
		default:
			next = c.opts.ttl / 10
			c.reportRepeated("renew", fmt.Errorf("leader: renewal of %q (retrying in %v): %w", c.role, next, err))
		}
		timer.Reset(next)
	}
}

// unlock releases the lease after term t (nil if none was granted). A
// lease that t already found lost is not reported lost again.
func (c *Candidate) unlock(t *Term) {
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.ttl)
	defer cancel()
	err := c.lock.UnlockContext(ctx)
	if err == nil {
		return
	}
	if t != nil && errors.Is(err, registry.ErrLockLost) && errors.Is(context.Cause(t.ctx), registry.ErrLockLost) {
		return
	}
	c.report(fmt.Errorf("leader: release of %q: %w", c.role, err))
}

// report passes err to the error handler, or logs it.
func (c *Candidate) report(err error) {
	if h := c.opts.errorHandler; h != nil {
		h(err)
		return
	}
	c.log.Error("lockreg: leader election error", err)
}

// reportRepeated is report for a failure of kind that the candidate
// retries, and so may repeat: logged at most once per RepeatInterval.
func (c *Candidate) reportRepeated(kind string, err error) {
	if h := c.opts.errorHandler; h != nil {
		h(err)
		return
	}
	c.log.Repeated(kind, "lockreg: leader election error", err)
}

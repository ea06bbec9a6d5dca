package registry

import (
	"context"
	"time"

	"github.com/lockreg/lockreg/internal/backoff"
)

// maxBackoff caps the wait between retries of transient errors.
const maxBackoff = time.Second

// newBackoff is the registry's retry policy: capped exponential delays
// with equal jitter (see internal/backoff), starting at the idle interval
// or 10 ms, whichever is shorter.
func newBackoff(idle time.Duration) *backoff.Backoff {
	return backoff.New(min(idle, 10*time.Millisecond), maxBackoff)
}

// sharedBoundReuse is how many times per TTL the shared bound of
// statements is made anew: a statement sent within TTL/sharedBoundReuse of
// the bound's making shares it, so its deadline lies between 15/16 of the
// TTL and the TTL after the statement's start.
const sharedBoundReuse = 16

// sharedBound is a context, with no values and no cancellation but its
// deadline, that bounds every statement of the registry's TTL that a
// caller without a deadline of its own sends shortly after made: one
// context.WithDeadline (a timer and three allocations) per TTL/16 instead of
// one per statement.
type sharedBound struct {
	ctx  context.Context
	made time.Time
	// cancel is never called: statements may use ctx until its deadline,
	// when its own timer cancels it and releases its resources.
	cancel context.CancelFunc
}

// bound returns ctx bounded by ttl from now, for one repository call sent
// now: a statement that takes longer than a lease would return a lease
// already expired. The deadline is never later than now+ttl and, unless
// ctx's own is earlier, not earlier than now+ttl·15/16. Call the returned
// cancel, when not nil, after the call.
func (r *Registry) bound(ctx context.Context, ttl time.Duration, now time.Time) (context.Context, context.CancelFunc) {
	if d, ok := ctx.Deadline(); ok && !d.After(now.Add(ttl)) {
		return ctx, nil // ctx's own deadline bounds the call already
	}
	if ctx.Done() == nil && ttl == r.opts.ttl {
		if s := r.shared(now); s != nil {
			if ctx == context.Background() || ctx == context.TODO() {
				return s, nil
			}
			return &withValues{Context: s, values: ctx}, nil
		}
	}
	return context.WithDeadline(ctx, now.Add(ttl))
}

// shared returns the registry's shared bound for a statement of the
// registry's TTL sent now, made anew when the last one is older than
// TTL/16, or nil when the last one was made after now (by a goroutine
// that read the clock later) and would bound the call by more than the
// TTL.
func (r *Registry) shared(now time.Time) context.Context {
	ttl := r.opts.ttl
	s := r.sharedBound.Load()
	if s != nil {
		age := now.Sub(s.made)
		if age < 0 {
			return nil
		}
		if age < ttl/sharedBoundReuse {
			return s.ctx
		}
	}
	ctx, cancel := context.WithDeadline(context.Background(), now.Add(ttl))
	r.sharedBound.Store(&sharedBound{ctx: ctx, made: now, cancel: cancel})
	return ctx
}

// withValues is a shared bound that carries the values of a caller's
// context without cancellation (trace spans, loggers' fields): the
// deadline, Done and Err are the bound's; values are looked up in the
// caller's context first, then in the bound's, so that contexts derived
// from it find the bound's cancellation and register with it directly
// instead of starting a goroutine to watch Done.
type withValues struct {
	context.Context // the shared bound
	values          context.Context
}

func (c *withValues) Value(key any) any {
	if v := c.values.Value(key); v != nil {
		return v
	}
	return c.Context.Value(key)
}

// transient marks err transient when it is due to the bound of bounded,
// not to ctx: such a call is worth a retry.
func transient(ctx, bounded context.Context, err error) error {
	if err != nil && ctx.Err() == nil && bounded.Err() != nil {
		return Transient(err)
	}
	return err
}

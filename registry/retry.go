package registry

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// maxBackoff caps the wait between retries of transient errors.
const maxBackoff = time.Second

// backoff is the registry's one retry policy: capped exponential delays
// with "equal jitter". Each delay is drawn from [d/2, d), so retrying
// clients spread out but never retry faster than half the nominal step.
type backoff struct {
	base, cur time.Duration
}

func newBackoff(idle time.Duration) backoff {
	base := min(idle, 10*time.Millisecond)
	return backoff{base: base, cur: base}
}

func (b *backoff) next() time.Duration {
	d := b.cur
	b.cur = min(b.cur*2, maxBackoff)
	half := d / 2
	return half + rand.N(half+1)
}

func (b *backoff) reset() { b.cur = b.base }

// attempt runs one repository call, bounded by ttl: a statement that takes
// longer than a lease would return a lease already expired. An error due to
// that bound, not to ctx, is marked transient: it is worth a retry.
func attempt(ctx context.Context, ttl time.Duration, call func(context.Context) error) error {
	actx, cancel := context.WithTimeout(ctx, ttl)
	defer cancel()
	err := call(actx)
	if err != nil && ctx.Err() == nil && actx.Err() != nil {
		err = Transient(err)
	}
	return err
}

// retryUntil runs call through attempt, each bounded by ttl, and retries
// transient errors with backoff until ctx is done or the next retry would
// start after until, when the lease it is about has run out and a retry
// could no longer matter. It passes each error it retries to retrying. It
// returns nil, the first error that is not transient, ctx's error, or the
// last transient error, noting that it gave up.
func retryUntil(ctx context.Context, until time.Time, ttl, idle time.Duration,
	retrying func(error), call func(context.Context) error) error {
	bo := newBackoff(idle)
	for {
		err := attempt(ctx, ttl, call)
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil || !errors.Is(err, ErrTransient):
			return err
		}
		delay := bo.next()
		if time.Until(until) < delay {
			return fmt.Errorf("gave up as the lease expired: %w", err)
		}
		retrying(err)
		if !sleep(ctx, delay, nil) {
			return ctx.Err()
		}
	}
}

// sleep waits for d and reports whether it did: false if ctx is done or
// stop is closed first. A nil stop never closes.
func sleep(ctx context.Context, d time.Duration, stop <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	case <-stop:
		return false
	}
}

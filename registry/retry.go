package registry

import (
	"context"
	"errors"
	"fmt"
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
// returns nil, the first error that is not transient, ctx's error, or, when
// it gives up, an error wrapping both ErrLockLost and the last transient
// error: the lease runs out before any retry could succeed, so the hold is
// over whatever the repository did, and a caller must treat the guarded
// data as possibly changed by another holder.
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
		delay := bo.Next()
		if time.Until(until) < delay {
			return fmt.Errorf("%w: gave up as the lease expires before a retry: %w", ErrLockLost, err)
		}
		retrying(err)
		if !backoff.Sleep(ctx, delay, nil) {
			return ctx.Err()
		}
	}
}

// Package backoff is lockreg's one retry policy: capped exponential delays
// with "equal jitter", and a sleep that ends early when its context is done
// or a stop channel closes. The registry, the repositories, the group stores
// and the task locks all retry with it, each with its own base and cap.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff yields the delays between retries: each is drawn from [d/2, d]
// where d starts at Base and doubles up to Max, so retrying clients spread
// out but never retry faster than half the nominal step. The zero value is
// not usable; make one with New. It is not safe for concurrent use.
type Backoff struct {
	base, max, cur time.Duration
}

// New returns a Backoff whose first delay is about base and whose delays
// never exceed maxDelay (nor base, if maxDelay is smaller). A base below one
// nanosecond counts as one.
func New(base, maxDelay time.Duration) *Backoff {
	base = max(base, 1)
	return &Backoff{base: base, max: max(base, maxDelay), cur: base}
}

// Next returns the next delay and doubles the one after it, up to the cap.
func (b *Backoff) Next() time.Duration {
	d := b.cur
	b.cur = min(b.cur*2, b.max)
	half := d / 2
	return half + rand.N(half+1)
}

// Reset makes the next delay the first again.
func (b *Backoff) Reset() { b.cur = b.base }

// Sleep waits for d and reports whether it did: false if ctx is done or
// stop is closed first. A nil stop never closes.
func Sleep(ctx context.Context, d time.Duration, stop <-chan struct{}) bool {
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

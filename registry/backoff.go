package registry

import (
	"math/rand/v2"
	"time"
)

// maxBackoff caps the wait between retries of transient errors.
const maxBackoff = time.Second

// backoff yields capped exponential delays with "equal jitter": each delay
// is drawn from [d/2, d), so retrying clients spread out but never retry
// faster than half the nominal step.
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

package etcdlock

import (
	"context"
	"sync"
)

// tracker counts background work in flight, so that Close can wait for
// it while holds, which outlive Close, may still start more.
type tracker struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed when n drops to 0
}

func (t *tracker) add() {
	t.mu.Lock()
	if t.n == 0 {
		t.idle = make(chan struct{})
	}
	t.n++
	t.mu.Unlock()
}

func (t *tracker) done() {
	t.mu.Lock()
	t.n--
	if t.n == 0 {
		close(t.idle)
	}
	t.mu.Unlock()
}

// wait waits until no work is in flight or ctx is done.
func (t *tracker) wait(ctx context.Context) error {
	t.mu.Lock()
	n, idle := t.n, t.idle
	t.mu.Unlock()
	if n == 0 {
		return nil
	}
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

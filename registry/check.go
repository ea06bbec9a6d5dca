package registry

import (
	"context"
	"fmt"
)

// Check reports whether the registry can serve locks, for a readiness
// probe: an error wrapping [ErrClosed] once Close was called, the error of
// the repository's Check when the repository is a [Checker] (package jdbc's
// checks that its table is reachable and of the right layout, and that its
// listener, once started, is connected; package redislock's pings the server
// and checks its listener the same way; package etcdlock's reads one key of
// its prefix and region, linearizably, and reports a waiter's watch that is
// failing), and nil otherwise. An error
// wrapping [ErrListenerDown] means locks still work, only hand-off is slower;
// an error wrapping [ErrTransient] may pass on retry. It costs what the
// repository's Check costs, a round trip or a few, and takes no lock.
func (r *Registry) Check(ctx context.Context) error {
	r.mu.Lock()
	closed := r.closed
	r.mu.Unlock()
	if closed {
		return fmt.Errorf("registry: check: %w", ErrClosed)
	}
	if c, ok := r.repo.(Checker); ok {
		if err := c.Check(ctx); err != nil {
			return fmt.Errorf("registry: check: %w", err)
		}
	}
	return nil
}

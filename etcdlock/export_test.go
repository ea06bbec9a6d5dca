package etcdlock

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// WaitKeepAliveStream waits until the keep-alive stream of r's client is
// open (keeper.go), starting its keeper if none runs.
func WaitKeepAliveStream(ctx context.Context, r *Repository) error {
	for r.stream() == nil {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}

// BreakKeepAliveStream ends the open keep-alive stream of r's client, as
// a member that goes away would, and returns it; nil if none was open.
func BreakKeepAliveStream(r *Repository) any {
	s := r.stream()
	if s != nil {
		s.cancel()
	}
	return s
}

// KeepAliveStream returns the open keep-alive stream of r's client, nil
// if none is.
func KeepAliveStream(r *Repository) any {
	if s := r.stream(); s != nil {
		return s
	}
	return nil
}

// KeeperRunning reports whether c has a keeper.
func KeeperRunning(c *clientv3.Client) bool {
	keepersMu.Lock()
	defer keepersMu.Unlock()
	return keepers[c] != nil
}

// AgeSpares makes r's spare leases look d older, as if their grants or
// last keep-alives had been sent d earlier: the repository then judges
// their life shorter than it is, which is safe, and tests need not sleep.
func AgeSpares(r *Repository, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, list := range r.spares {
		for i := range list {
			list[i].fresh = list[i].fresh.Add(-d)
		}
	}
}

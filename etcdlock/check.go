package etcdlock

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Check reports whether the repository can serve leases, for readiness
// probes ([registry.Registry.Check] calls it): one linearizable range read
// of at most one key of the repository's prefix and region, which fails
// (transiently) when no member with a leader answers, and with a
// permission error when the client's user may not read there; then an
// error wrapping registry.ErrListenerDown while a waiter's watch is
// failing (locks still work then: waiters poll). It changes nothing.
func (r *Repository) Check(ctx context.Context) error {
	start := time.Now()
	_, err := r.c.Get(ctx, r.cfg.ns, clientv3.WithPrefix(), clientv3.WithLimit(1), clientv3.WithKeysOnly())
	r.cfg.tel.request("read", start, err)
	if err != nil {
		return r.wrap(ctx, "etcdlock: check", err)
	}
	if err := r.ears.check(); err != nil {
		return fmt.Errorf("etcdlock: check: %w", err)
	}
	return nil
}

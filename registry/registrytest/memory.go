package registrytest

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/lockreg/lockreg/registry"
)

// Memory is lease storage in process memory whose clients behave like
// clients of a shared lock table: use it to test code that runs several
// registries, standing for several instances, without a database. It is
// safe for concurrent use.
type Memory struct {
	mu      sync.Mutex
	leases  map[string]memLease
	clients int
	tokens  int64 // the last fencing token issued, for any key
}

type memLease struct {
	owner   int
	expires time.Time
}

// NewMemory returns empty lease storage.
func NewMemory() *Memory {
	return &Memory{leases: make(map[string]memLease)}
}

// NewClient returns a client of m with an identity of its own.
func (m *Memory) NewClient() registry.Repository {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.clients++
	return &memClient{m: m, id: m.clients}
}

// DeleteExpired removes expired leases.
func (m *Memory) DeleteExpired(context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	for k, l := range m.leases {
		if !l.expires.After(now) {
			delete(m.leases, k)
		}
	}
	return nil
}

type memClient struct {
	m      *Memory
	id     int
	closed bool // guarded by m.mu
}

func (c *memClient) Acquire(ctx context.Context, key string, ttl time.Duration) (registry.Lease, bool, error) {
	if err := ctx.Err(); err != nil {
		return registry.Lease{}, false, err
	}
	if ttl <= 0 {
		return registry.Lease{}, false, fmt.Errorf("registrytest: acquire %q: %w", key, registry.ErrInvalidTTL)
	}
	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	if c.closed {
		return registry.Lease{}, false, fmt.Errorf("registrytest: acquire %q: %w", key, registry.ErrClosed)
	}
	now := time.Now()
	if l, ok := c.m.leases[key]; ok && l.owner != c.id && l.expires.After(now) {
		return registry.Lease{}, false, nil
	}
	c.m.leases[key] = memLease{owner: c.id, expires: now.Add(ttl)}
	c.m.tokens++
	return registry.Lease{Token: c.m.tokens}, true, nil
}

func (c *memClient) Renew(ctx context.Context, key string, ttl time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if ttl <= 0 {
		return fmt.Errorf("registrytest: renew %q: %w", key, registry.ErrInvalidTTL)
	}
	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	now := time.Now()
	l, ok := c.m.leases[key]
	if !ok || l.owner != c.id || !l.expires.After(now) {
		return fmt.Errorf("registrytest: renew %q: %w", key, registry.ErrLockLost)
	}
	c.m.leases[key] = memLease{owner: c.id, expires: now.Add(ttl)}
	return nil
}

func (c *memClient) Release(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	l, ok := c.m.leases[key]
	if !ok || l.owner != c.id {
		return fmt.Errorf("registrytest: release %q: %w", key, registry.ErrLockLost)
	}
	delete(c.m.leases, key)
	return nil
}

// Close refuses later acquisitions. Memory leases need no clean-up: a
// client's leases end with their TTL or their release.
func (c *memClient) Close(context.Context) error {
	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	c.closed = true
	return nil
}

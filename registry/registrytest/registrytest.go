// Package registrytest is the conformance suite that every
// [registry.Repository] must pass, run through [registry.Registry] as users
// run it. A backend's tests call [Run] with a [Backend] that makes clients of
// its storage, as Watermill's pub/sub test suite does for its adapters.
package registrytest

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockreg/lockreg/registry"
)

// Backend describes the storage under test.
type Backend struct {
	// NewRepository returns a new client of the backend's shared storage,
	// with an identity of its own. Clients from one Backend must exclude
	// each other. The suite closes every client it gets. A nil
	// NewRepository tests the in-process registry of [registry.NewLocal]:
	// the tests that need several clients are skipped. Give each Run
	// storage of its own (a fresh region, say): a few keys, such as the
	// empty one, are the same in every run.
	NewRepository func(t testing.TB) registry.Repository

	// DeleteExpired removes expired leases from the storage, as Spring's
	// DefaultLockRepository.deleteExpired does. Optional.
	DeleteExpired func(ctx context.Context) error

	// NewMissingStorage returns a client whose storage does not exist (a
	// missing table, say). Optional.
	NewMissingStorage func(t testing.TB) registry.Repository
}

// Leases in the expiry tests last ttl and are left alone for twice that.
const (
	ttl  = 300 * time.Millisecond
	past = 2 * ttl
	// renewTTL is the TTL of the tests whose renewals must each return
	// within a fraction of it: with ttl, the Done deadline of a registry
	// (0.8 of the TTL) left some 140 ms per renewal, which 2 loaded cores
	// did not always give (CI).
	renewTTL = time.Second
	short    = 20 * time.Millisecond // idle between tries in most tests
)

// Run runs the whole suite against b.
func Run(t *testing.T, b Backend) {
	t.Run("Repository", func(t *testing.T) { runRepository(t, b) })
	t.Run("Registry", func(t *testing.T) { runRegistry(t, b) })
	t.Run("Cache", func(t *testing.T) { runCache(t, b) })
	t.Run("Lease", func(t *testing.T) { runLease(t, b) })
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// key returns a key no other test uses.
func key(t testing.TB, suffix ...string) string {
	return strings.Join(append([]string{t.Name()}, suffix...), "#")
}

func distributed(t testing.TB, b Backend) {
	t.Helper()
	if b.NewRepository == nil {
		t.Skip("requires several clients of shared storage; the local registry has one")
	}
}

// client returns a repository closed when the test ends.
func client(t testing.TB, b Backend) registry.Repository {
	t.Helper()
	r := b.NewRepository(t)
	t.Cleanup(func() {
		if err := r.Close(context.Background()); err != nil {
			t.Errorf("closing repository: %v", err)
		}
	})
	return r
}

// errorLog collects what a registry passes to its error handler.
type errorLog struct {
	mu   sync.Mutex
	errs []error
}

func (e *errorLog) handle(_ string, err error) {
	e.mu.Lock()
	e.errs = append(e.errs, err)
	e.mu.Unlock()
}

func (e *errorLog) all() []error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]error(nil), e.errs...)
}

// newRegistry returns a registry over a new client of b (or a local one),
// closed when the test ends, with short idle intervals unless opts say
// otherwise.
func newRegistry(t testing.TB, b Backend, opts ...registry.Option) *registry.Registry {
	t.Helper()
	var repo registry.Repository
	if b.NewRepository != nil {
		repo = b.NewRepository(t)
	}
	return newRegistryOn(t, repo, opts...)
}

func newRegistryOn(t testing.TB, repo registry.Repository, opts ...registry.Option) *registry.Registry {
	t.Helper()
	opts = append([]registry.Option{registry.WithIdleBetweenTries(short)}, opts...)
	var r *registry.Registry
	var err error
	if repo == nil {
		r, err = registry.NewLocal(opts...)
	} else {
		r, err = registry.New(repo, opts...)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Close(context.Background()); err != nil {
			t.Errorf("closing registry: %v", err)
		}
	})
	return r
}

// counting wraps a repository and counts the acquisitions it is asked for.
type counting struct {
	registry.Repository
	acquires, inflight, maxInflight atomic.Int64
	failAcquires                    atomic.Int64 // fail this many with a transient error first
}

func (c *counting) Acquire(ctx context.Context, key string, ttl time.Duration) (registry.Lease, bool, error) {
	c.acquires.Add(1)
	n := c.inflight.Add(1)
	defer c.inflight.Add(-1)
	for {
		m := c.maxInflight.Load()
		if n <= m || c.maxInflight.CompareAndSwap(m, n) {
			break
		}
	}
	if c.failAcquires.Add(-1) >= 0 {
		return registry.Lease{}, false, registry.Transient(errors.New("registrytest: injected transient failure"))
	}
	return c.Repository.Acquire(ctx, key, ttl)
}

// wrapped returns a counting repository over a new client of b, or over
// nothing for the local registry.
func wrapped(t testing.TB, b Backend) *counting {
	var repo registry.Repository = grantAll{}
	if b.NewRepository != nil {
		repo = b.NewRepository(t)
	}
	return &counting{Repository: repo}
}

// grantAll stands in for the local registry's repository when a test needs
// to count calls.
type grantAll struct{}

func (grantAll) Acquire(context.Context, string, time.Duration) (registry.Lease, bool, error) {
	return registry.Lease{}, true, nil
}
func (grantAll) Renew(context.Context, string, time.Duration) error { return nil }
func (grantAll) Release(context.Context, string) error              { return nil }
func (grantAll) Close(context.Context) error                        { return nil }

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func wantLost(t testing.TB, err error) {
	t.Helper()
	if !errors.Is(err, registry.ErrLockLost) {
		t.Fatalf("got %v, want an error wrapping registry.ErrLockLost", err)
	}
}

func acquire(t testing.TB, r registry.Repository, key string, d time.Duration) bool {
	t.Helper()
	_, ok, err := r.Acquire(ctxT(t), key, d)
	must(t, err)
	return ok
}

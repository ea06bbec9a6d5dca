package leader_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockreg/lockreg/leader"
	"github.com/lockreg/lockreg/registry"
)

// patience bounds every wait of these tests: long enough for a loaded
// machine, short enough to fail a hung test.
const patience = time.Minute

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	t.Cleanup(cancel)
	return ctx
}

// newRegistry returns a registry on repo, one instance's client, that
// polls often, closed when t ends (after the candidates made later).
func newRegistry(t testing.TB, repo registry.Repository, opts ...registry.Option) *registry.Registry {
	t.Helper()
	opts = append([]registry.Option{registry.WithIdleBetweenTries(5 * time.Millisecond),
		registry.WithErrorHandler(func(string, error) {})}, opts...)
	reg, err := registry.New(repo, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := reg.Close(context.Background()); err != nil {
			t.Errorf("closing the registry: %v", err)
		}
	})
	return reg
}

// newCandidate returns a candidate closed when t ends.
func newCandidate(t testing.TB, locks registry.LockRegistry, role string, opts ...leader.Option) *leader.Candidate {
	t.Helper()
	c, err := leader.New(locks, role, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(ctxT(t)); err != nil {
			t.Errorf("closing the candidate: %v", err)
		}
	})
	return c
}

// waitLead waits until c leads.
func waitLead(t testing.TB, c *leader.Candidate) *leader.Term {
	t.Helper()
	term, err := c.Wait(ctxT(t))
	if err != nil {
		t.Fatalf("waiting for %q to lead: %v", c.Role(), err)
	}
	return term
}

// waitDone waits until ctx is done.
func waitDone(t testing.TB, ctx context.Context, what string) {
	t.Helper()
	select {
	case <-ctx.Done():
	case <-time.After(patience):
		t.Fatalf("%s: the term's context was not cancelled", what)
	}
}

// faulty is a repository whose calls can be made to fail: renew and
// acquire, if set, are asked before each call (numbered from 1, with the
// call's context) and fail it with the error they return.
type faulty struct {
	registry.Repository
	renew, acquire func(ctx context.Context, n int) error
	renews         atomic.Int64 // Renew calls
	renewed        atomic.Int64 // Renew calls that succeeded
	acquires       atomic.Int64
}

func (f *faulty) Acquire(ctx context.Context, key string, ttl time.Duration) (registry.Lease, bool, error) {
	n := int(f.acquires.Add(1))
	if f.acquire != nil {
		if err := f.acquire(ctx, n); err != nil {
			return registry.Lease{}, false, err
		}
	}
	return f.Repository.Acquire(ctx, key, ttl)
}

func (f *faulty) Renew(ctx context.Context, key string, ttl time.Duration) error {
	n := int(f.renews.Add(1))
	if f.renew != nil {
		if err := f.renew(ctx, n); err != nil {
			return err
		}
	}
	err := f.Repository.Renew(ctx, key, ttl)
	if err == nil {
		f.renewed.Add(1)
	}
	return err
}

// errorLog collects the errors a candidate reports.
type errorLog struct {
	mu   sync.Mutex
	errs []error
}

func (l *errorLog) handle(err error) {
	l.mu.Lock()
	l.errs = append(l.errs, err)
	l.mu.Unlock()
}

func (l *errorLog) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.errs)
}

// eventually waits until cond holds.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// rotation records the terms of candidates that hand the leadership
// around by yielding, failing the test when two overlap.
type rotation struct {
	t       *testing.T
	want    int
	active  atomic.Int32
	mu      sync.Mutex
	tokens  []int64
	leaders map[int]bool
	enough  chan struct{}
	once    sync.Once
}

// newRotation returns a rotation that is complete after terms terms.
func newRotation(t *testing.T, terms int) *rotation {
	return &rotation{t: t, want: terms, leaders: map[int]bool{}, enough: make(chan struct{})}
}

// options returns candidate i's OnGranted, which records the term, leads
// for lead and yields, and OnRevoked.
func (r *rotation) options(i int, lead time.Duration) []leader.Option {
	return []leader.Option{
		leader.OnGranted(func(term *leader.Term) {
			if n := r.active.Add(1); n != 1 {
				r.t.Errorf("candidate %d granted while %d others lead", i, n-1)
			}
			r.mu.Lock()
			r.tokens = append(r.tokens, term.Token())
			r.leaders[i] = true
			if len(r.tokens) == r.want {
				r.once.Do(func() { close(r.enough) })
			}
			r.mu.Unlock()
			time.Sleep(lead)
			term.Yield()
		}),
		leader.OnRevoked(func(*leader.Term) { r.active.Add(-1) }),
	}
}

// check waits for the terms and fails the test unless their tokens
// increase and more than one candidate led; it returns how many terms and
// leaders it saw.
func (r *rotation) check() (terms, leaders int) {
	r.t.Helper()
	select {
	case <-r.enough:
	case <-time.After(patience):
		r.t.Fatal("too few terms")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := 1; i < len(r.tokens); i++ {
		if r.tokens[i] <= r.tokens[i-1] {
			r.t.Errorf("term %d has token %d, not greater than the previous term's %d", i, r.tokens[i], r.tokens[i-1])
		}
	}
	if len(r.leaders) < 2 {
		r.t.Errorf("only %d candidate led in %d terms: no hand-over was tested", len(r.leaders), len(r.tokens))
	}
	return len(r.tokens), len(r.leaders)
}

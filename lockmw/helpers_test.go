package lockmw_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"go.uber.org/goleak"

	"github.com/lockreg/lockreg/lockmw"
	"github.com/lockreg/lockreg/registry"
	"github.com/lockreg/lockreg/registry/registrytest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// faults wraps one instance's client of the shared in-memory storage so that
// a test can make its renewals stall, as they do when the database is
// unreachable, and its releases find the lease lost. It counts renewals.
type faults struct {
	registry.Repository
	stallRenew  atomic.Bool
	loseRelease atomic.Bool
	renewals    atomic.Int64
}

func (f *faults) Renew(ctx context.Context, key string, ttl time.Duration) error {
	if f.stallRenew.Load() {
		<-ctx.Done()
		return registry.Transient(ctx.Err())
	}
	err := f.Repository.Renew(ctx, key, ttl)
	if err == nil {
		f.renewals.Add(1)
	}
	return err
}

func (f *faults) Release(ctx context.Context, key string) error {
	err := f.Repository.Release(ctx, key)
	if err == nil && f.loseRelease.Load() {
		return fmt.Errorf("faults: release %q: %w", key, registry.ErrLockLost)
	}
	return err
}

// instance is one service instance: a registry of its own over the shared
// storage.
type instance struct {
	locks  *registry.Registry
	faults *faults
}

// newInstances returns n instances sharing one in-memory lock storage, as
// instances share a lock table; their registries are closed when t ends.
func newInstances(t *testing.T, n int, opts ...registry.Option) []*instance {
	t.Helper()
	storage := registrytest.NewMemory()
	var out []*instance
	for range n {
		f := &faults{Repository: storage.NewClient()}
		reg, err := registry.New(f, append([]registry.Option{registry.WithIdleBetweenTries(5 * time.Millisecond),
			registry.WithErrorHandler(func(string, error) {})}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := reg.Close(context.Background()); err != nil {
				t.Errorf("closing a registry: %v", err)
			}
		})
		out = append(out, &instance{locks: reg, faults: f})
	}
	return out
}

// perKey returns the middleware on locks keyed by the "entity_id" metadata.
func perKey(t *testing.T, locks registry.LockRegistry, opts ...lockmw.Option) message.HandlerMiddleware {
	t.Helper()
	mw, err := lockmw.PerKey(locks, lockmw.KeyFromMetadata("entity_id"), append([]lockmw.Option{lockmw.WithLogger(watermill.NopLogger{})}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return mw
}

// chain wraps h in mws as router.AddMiddleware(mws...) does: the first is
// outermost.
func chain(h message.HandlerFunc, mws ...message.HandlerMiddleware) message.HandlerFunc {
	for i := len(mws) - 1; i >= 0; i-- {
		h = mws[i](h)
	}
	return h
}

// msgFor returns a message of key ("" for none).
func msgFor(key string) *message.Message {
	m := message.NewMessage(watermill.NewUUID(), []byte(key))
	if key != "" {
		m.Metadata.Set("entity_id", key)
	}
	return m
}

// handlerFunc adapts a handler without output.
func handlerFunc(f func(*message.Message) error) message.HandlerFunc {
	return func(m *message.Message) ([]*message.Message, error) { return nil, f(m) }
}

// waitFor fails t unless cond holds within a generous bound; it polls, so
// the bound only matters when the code under test is broken.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 30 s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// errNotCancelled is what awaitCancel returns when the context lives on.
var errNotCancelled = errors.New("the handler's context was not cancelled within 30 s")

// awaitCancel waits until ctx is cancelled, and returns errNotCancelled if
// that takes more than 30 s: only broken code gets there.
func awaitCancel(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return nil
	case <-time.After(30 * time.Second):
		return errNotCancelled
	}
}

// keyHeld reports whether the lock of key is held anywhere but in inst:
// inst's single attempt to take it fails. It releases what it took.
func keyHeld(t *testing.T, inst *instance, lockKey string) bool {
	t.Helper()
	l := inst.locks.Obtain(lockKey)
	ok, err := l.TryLockContext(context.Background())
	if err != nil {
		t.Fatalf("TryLock %q: %v", lockKey, err)
	}
	if ok {
		l.Unlock()
	}
	return !ok
}

// inFlight tracks the handlers running per key.
type inFlight struct {
	mu      sync.Mutex
	running map[string]int
	most    int // the most handlers of one key seen running at once
}

func (f *inFlight) enter(key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.running == nil {
		f.running = map[string]int{}
	}
	f.running[key]++
	f.most = max(f.most, f.running[key])
}

func (f *inFlight) leave(key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.running[key]--
}

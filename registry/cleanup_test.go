package registry_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockreg/lockreg/registry"
	"github.com/lockreg/lockreg/registry/registrytest"
)

// errMissing stands for a repository error that no retry cures, such as a
// missing table.
var errMissing = errors.New("table does not exist")

// breakableQueue is a memory client that is also a [registry.Queue], as
// jdbc's repository is, so that a failed LockContext leaves the key's queue
// in the background. While broken, its acquisitions fail with errMissing;
// Leave waits for proceed to close.
type breakableQueue struct {
	registry.Repository
	broken  atomic.Bool
	proceed chan struct{}
}

func newBreakableQueue() *breakableQueue {
	q := &breakableQueue{Repository: registrytest.NewMemory().NewClient(), proceed: make(chan struct{})}
	q.broken.Store(true)
	return q
}

func (q *breakableQueue) Acquire(ctx context.Context, key string, ttl time.Duration) (registry.Lease, bool, error) {
	if q.broken.Load() {
		return registry.Lease{}, false, errMissing
	}
	return q.Repository.Acquire(ctx, key, ttl)
}

func (q *breakableQueue) AcquireOrWait(ctx context.Context, key string, ttl time.Duration) (registry.Lease, bool, error) {
	return q.Acquire(ctx, key, ttl)
}

func (q *breakableQueue) Leave(context.Context, string) error {
	<-q.proceed
	return nil
}

type tryResult struct {
	ok  bool
	err error
}

// tryAfterFailedLock makes a LockContext fail on q, then calls
// TryLockContext while the failed call still leaves the queue, and returns
// its result once the leave has ended. In a synctest bubble, the
// TryLockContext has either returned or is blocked when the leave ends.
func tryAfterFailedLock(t *testing.T, q *breakableQueue, fixed bool) tryResult {
	t.Helper()
	r, err := registry.New(q, registry.WithErrorHandler(func(string, error) {}))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	l := r.Obtain("k")
	if err := l.LockContext(context.Background()); !errors.Is(err, errMissing) {
		t.Fatalf("LockContext = %v, want the repository's error", err)
	}
	q.broken.Store(!fixed)
	res := make(chan tryResult, 1)
	go func() {
		ok, err := l.TryLockContext(context.Background())
		res <- tryResult{ok, err}
	}()
	synctest.Wait() // TryLockContext returned, or waits for the leave
	close(q.proceed)
	got := <-res
	if got.ok {
		l.Unlock()
	}
	return got
}

func TestTryLockAfterFailedLockReturnsTheRepositoryErrorAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		got := tryAfterFailedLock(t, newBreakableQueue(), false)
		if got.ok || !errors.Is(got.err, errMissing) {
			t.Fatalf("TryLockContext right after a failed LockContext = %v, %v; want false and the repository's error", got.ok, got.err)
		}
	})
}

func TestTryLockAfterFailedLockAcquiresOnceTheRepositoryWorks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		got := tryAfterFailedLock(t, newBreakableQueue(), true)
		if !got.ok || got.err != nil {
			t.Fatalf("TryLockContext right after a failed LockContext, the repository fixed = %v, %v; want true, nil", got.ok, got.err)
		}
	})
}

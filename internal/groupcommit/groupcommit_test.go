package groupcommit

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// recorder is a Batcher of ints whose Exec records its batches and, while
// gated, holds the first statement until released.
type recorder struct {
	b       Batcher[int]
	mu      sync.Mutex
	batches [][]int
	gate    chan struct{} // closed to let the first statement end
	entered chan struct{} // closed when the first statement starts
	once    sync.Once
}

func newRecorder(maxBatch int, apart func(a, b int) bool) *recorder {
	r := &recorder{gate: make(chan struct{}), entered: make(chan struct{})}
	r.b = Batcher[int]{Max: 1, MaxBatch: maxBatch, Apart: apart, Exec: func(batch []*Call[int]) {
		r.mu.Lock()
		items := make([]int, len(batch))
		for i, c := range batch {
			items[i] = c.Item
		}
		r.batches = append(r.batches, items)
		r.mu.Unlock()
		first := false
		r.once.Do(func() { first = true; close(r.entered) })
		if first {
			<-r.gate
		}
	}}
	return r
}

// queued waits until n calls wait for a statement.
func (r *recorder) queued(t *testing.T, n int) {
	t.Helper()
	for {
		r.b.mu.Lock()
		q := len(r.b.queue)
		r.b.mu.Unlock()
		if q == n {
			return
		}
		runtime.Gosched()
		if q > n {
			t.Fatalf("%d calls wait, want %d", q, n)
		}
	}
}

// start runs items as calls in goroutines, after the first statement
// (item first) has started and while it is held.
func (r *recorder) start(t *testing.T, wg *sync.WaitGroup, first int, items ...int) {
	t.Helper()
	wg.Go(func() { r.b.Do(&Call[int]{Ctx: context.Background(), Item: first}) })
	<-r.entered
	for i, it := range items {
		wg.Go(func() { r.b.Do(&Call[int]{Ctx: context.Background(), Item: it}) })
		r.queued(t, i+1)
	}
}

func TestALoneCallRunsAtOnceAndAlone(t *testing.T) {
	r := newRecorder(8, nil)
	close(r.gate)
	if err := r.b.Do(&Call[int]{Ctx: context.Background(), Item: 7}); err != nil {
		t.Fatal(err)
	}
	if !slices.EqualFunc(r.batches, [][]int{{7}}, slices.Equal) {
		t.Errorf("batches %v, want [[7]]", r.batches)
	}
}

func TestCallsThatArriveWhileAStatementIsInFlightRunTogetherNext(t *testing.T) {
	r := newRecorder(8, nil)
	var wg sync.WaitGroup
	r.start(t, &wg, 1, 2, 3, 4)
	close(r.gate)
	wg.Wait()
	if !slices.EqualFunc(r.batches, [][]int{{1}, {2, 3, 4}}, slices.Equal) {
		t.Errorf("batches %v, want [[1] [2 3 4]]", r.batches)
	}
}

func TestABatchHoldsAtMostMaxBatchCalls(t *testing.T) {
	r := newRecorder(2, nil)
	var wg sync.WaitGroup
	r.start(t, &wg, 1, 2, 3, 4)
	close(r.gate)
	wg.Wait()
	if !slices.EqualFunc(r.batches, [][]int{{1}, {2, 3}, {4}}, slices.Equal) {
		t.Errorf("batches %v, want [[1] [2 3] [4]]", r.batches)
	}
}

func TestCallsKeptApartWaitForALaterStatementInTheirOrder(t *testing.T) {
	r := newRecorder(8, func(a, b int) bool { return a%10 == b%10 })
	var wg sync.WaitGroup
	r.start(t, &wg, 1, 2, 12, 3, 22)
	close(r.gate)
	wg.Wait()
	if !slices.EqualFunc(r.batches, [][]int{{1}, {2, 3}, {12}, {22}}, slices.Equal) {
		t.Errorf("batches %v, want [[1] [2 3] [12] [22]]", r.batches)
	}
}

func TestACallWhoseContextEndsWhileItWaitsIsNotRun(t *testing.T) {
	r := newRecorder(8, nil)
	var wg sync.WaitGroup
	r.start(t, &wg, 1)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- r.b.Do(&Call[int]{Ctx: ctx, Item: 2}) }()
	r.queued(t, 1)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("Do = %v, want context.Canceled", err)
	}
	close(r.gate)
	wg.Wait()
	if !slices.EqualFunc(r.batches, [][]int{{1}}, slices.Equal) {
		t.Errorf("batches %v, want [[1]]", r.batches)
	}
}

package scheduler_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.uber.org/goleak"

	"github.com/lockreg/lockreg/internal/testdb"
	"github.com/lockreg/lockreg/scheduler"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testdb.DriverGoroutines()...) }

var ctxb = context.Background()

// newTable creates a table of its own for t with CreateSchema, drops it
// when t ends, and returns the Config of it with short intervals and tasks.
func newTable(t testing.TB, b testdb.Backend, tasks ...scheduler.Task) scheduler.Config {
	t.Helper()
	table := "st_" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	cfg := scheduler.Config{Table: table, Tasks: tasks, PollInterval: 50 * time.Millisecond}
	if err := scheduler.CreateSchema(ctxb, b.DB, cfg); err != nil {
		t.Fatalf("CreateSchema: %v", err)
	}
	t.Cleanup(func() { b.DB.ExecContext(ctxb, `DROP TABLE `+table) })
	return cfg
}

// start makes and starts a scheduler on cfg, stopped when t ends.
func start(t testing.TB, b testdb.Backend, cfg scheduler.Config) *scheduler.Scheduler {
	t.Helper()
	s, err := scheduler.New(b.DB, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctxb); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(ctxb, 30*time.Second)
		defer cancel()
		s.Stop(ctx)
	})
	return s
}

func newClient(t testing.TB, b testdb.Backend, cfg scheduler.Config) *scheduler.Client {
	t.Helper()
	c, err := scheduler.NewClient(b.DB, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// runs records the executions handlers saw, by instance.
type runs struct {
	mu   sync.Mutex
	seen map[string]int
	data map[string]string
}

func newRuns() *runs { return &runs{seen: map[string]int{}, data: map[string]string{}} }

func (r *runs) add(e *scheduler.Execution) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen[e.Instance]++
	r.data[e.Instance] = string(e.Data)
}

func (r *runs) count(inst string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seen[inst]
}

func (r *runs) total() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.seen {
		n += c
	}
	return n
}

// recorder is a one-time task that records its executions.
func recorder(name string, r *runs, opts ...scheduler.TaskOption) scheduler.Task {
	return scheduler.OneTime(name, func(ctx context.Context, e *scheduler.Execution) error {
		r.add(e)
		return nil
	}, opts...)
}

// row reads an execution, failing t on an error other than ErrNotFound,
// which it reports as nil.
func row(t testing.TB, c *scheduler.Client, task, id string) *scheduler.Execution {
	t.Helper()
	e, err := c.Get(ctxb, task, id)
	if err != nil {
		if strings.Contains(err.Error(), "not found") {
			return nil
		}
		t.Fatal(err)
	}
	return e
}

// ago is an SQL expression of the database's clock minus d, in the
// table's time representation.
func ago(b testdb.Backend, d time.Duration) string {
	switch b.Dialect {
	case "postgres":
		return fmt.Sprintf(`now() - INTERVAL '%d milliseconds'`, d.Milliseconds())
	case "mysql":
		return fmt.Sprintf(`UTC_TIMESTAMP(6) - INTERVAL %d MICROSECOND`, d.Microseconds())
	}
	return fmt.Sprintf(`CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER) - %d`, d.Milliseconds())
}

// blocker is a one-time task whose handler blocks until release is closed
// or its context ends, and reports each start on started.
type blocker struct {
	started chan *scheduler.Execution
	release chan struct{}
	causes  chan error // the context's cause, when the context ended
}

func newBlocker() *blocker {
	return &blocker{started: make(chan *scheduler.Execution, 100), release: make(chan struct{}), causes: make(chan error, 100)}
}

func (bl *blocker) task(name string, opts ...scheduler.TaskOption) scheduler.Task {
	return scheduler.OneTime(name, func(ctx context.Context, e *scheduler.Execution) error {
		bl.started <- e
		select {
		case <-bl.release:
			return nil
		case <-ctx.Done():
			bl.causes <- context.Cause(ctx)
			return ctx.Err()
		}
	}, opts...)
}

// receive returns the next value of c, failing t after a minute.
func receive[T any](t testing.TB, c <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(time.Minute):
		t.Fatalf("no %s within a minute", what)
		panic("unreachable")
	}
}

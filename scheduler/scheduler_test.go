package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockreg/lockreg/internal/testdb"
	"github.com/lockreg/lockreg/scheduler"
)

func TestAOneTimeExecutionRunsOnceWithItsDataAndIsDeleted(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, b testdb.Backend) {
		r := newRuns()
		cfg := newTable(t, b, recorder("mail", r))
		s := start(t, b, cfg)
		if err := s.Schedule(ctxb, scheduler.Instance{Task: "mail", ID: "1", Data: "hello"}, time.Now()); err != nil {
			t.Fatal(err)
		}
		testdb.WaitFor(t, "the execution to run and be deleted", func() bool {
			return r.count("1") == 1 && row(t, s.Client, "mail", "1") == nil
		})
		if r.data["1"] != `"hello"` {
			t.Fatalf("data %s", r.data["1"])
		}
	})
}

func TestAnExecutionIsNotRunBeforeItsTime(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, b testdb.Backend) {
		r := newRuns()
		cfg := newTable(t, b, recorder("t", r))
		s := start(t, b, cfg)
		s.Schedule(ctxb, scheduler.Instance{Task: "t", ID: "later"}, time.Now().Add(time.Hour))
		s.Schedule(ctxb, scheduler.Instance{Task: "t", ID: "now"}, time.Now())
		testdb.WaitFor(t, "the due execution", func() bool { return r.count("now") == 1 })
		if r.count("later") != 0 || row(t, s.Client, "t", "later") == nil {
			t.Fatal("the execution due in an hour ran")
		}
	})
}

func TestManyExecutionsEachRunOnceAcrossFourSchedulers(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, b testdb.Backend) {
		r := newRuns()
		var concurrent, maxConcurrent atomic.Int32
		task := scheduler.OneTime("job", func(ctx context.Context, e *scheduler.Execution) error {
			n := concurrent.Add(1)
			for m := maxConcurrent.Load(); n > m && !maxConcurrent.CompareAndSwap(m, n); m = maxConcurrent.Load() {
			}
			r.add(e)
			concurrent.Add(-1)
			return nil
		})
		cfg := newTable(t, b, task)
		c := newClient(t, b, cfg)
		const n = 400
		for i := range n {
			if err := c.Schedule(ctxb, scheduler.Instance{Task: "job", ID: fmt.Sprint(i)}, time.Now()); err != nil {
				t.Fatal(err)
			}
		}
		for range 4 {
			start(t, b, cfg)
		}
		testdb.WaitFor(t, "every execution", func() bool { return r.total() >= n })
		testdb.WaitFor(t, "the table to empty", func() bool {
			all, _ := c.List(ctxb, scheduler.Filter{})
			return len(all) == 0
		})
		for i := range n {
			if got := r.count(fmt.Sprint(i)); got != 1 {
				t.Errorf("execution %d ran %d times", i, got)
			}
		}
	})
}

func TestARecurringTaskRunsAgainAndKeepsOneExecution(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, b testdb.Backend) {
		r := newRuns()
		task := scheduler.Recurring("tick", scheduler.Must(scheduler.FixedDelay(10*time.Millisecond)),
			func(ctx context.Context, e *scheduler.Execution) error { r.add(e); return nil })
		cfg := newTable(t, b, task)
		s := start(t, b, cfg)
		testdb.WaitFor(t, "three runs", func() bool { return r.count(scheduler.RecurringInstance) >= 3 })
		all, err := s.List(ctxb, scheduler.Filter{})
		if err != nil || len(all) != 1 || all[0].Instance != scheduler.RecurringInstance {
			t.Fatalf("List: %v %+v, want the one recurring execution", err, all)
		}
		if e := all[0]; e.LastSuccess.IsZero() || e.ConsecutiveFailures != 0 {
			t.Fatalf("after successes: %+v", e)
		}
	})
}

func TestStartMovesARecurringExecutionWhenTheScheduleChanged(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, b testdb.Backend) {
		noop := func(context.Context, *scheduler.Execution) error { return nil }
		daily := scheduler.Must(scheduler.Daily(time.UTC, "03:00"))
		cfg := newTable(t, b, scheduler.Recurring("report", daily, noop))
		start(t, b, cfg).Stop(ctxb)
		c := newClient(t, b, cfg)
		first := row(t, c, "report", scheduler.RecurringInstance)
		if want := daily.Next(time.Now()); !first.Time.Equal(want) {
			t.Fatalf("first time %v, want %v", first.Time, want)
		}
		other := scheduler.Must(scheduler.Daily(time.UTC, "04:30"))
		cfg.Tasks = []scheduler.Task{scheduler.Recurring("report", other, noop)}
		start(t, b, cfg).Stop(ctxb)
		if e, want := row(t, c, "report", scheduler.RecurringInstance), other.Next(time.Now()); !e.Time.Equal(want) {
			t.Fatalf("after the deploy: %v, want %v", e.Time, want)
		}
		cfg.Tasks = []scheduler.Task{scheduler.Recurring("report", scheduler.Disabled, noop)}
		start(t, b, cfg).Stop(ctxb)
		if e := row(t, c, "report", scheduler.RecurringInstance); e != nil {
			t.Fatalf("disabled, the execution is still there: %+v", e)
		}
	})
}

func TestAFailedExecutionIsRetriedByItsFailureHandlerAndCountsFailures(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, b testdb.Backend) {
		var calls atomic.Int32
		var dead atomic.Pointer[scheduler.Failure]
		task := scheduler.OneTime("flaky", func(ctx context.Context, e *scheduler.Execution) error {
			calls.Add(1)
			return errors.New("boom")
		}, scheduler.OnFailure(scheduler.MaxRetries(3, scheduler.RetryAfter(0), func(ctx context.Context, f scheduler.Failure) {
			dead.Store(&f)
		})))
		cfg := newTable(t, b, task)
		s := start(t, b, cfg)
		s.Schedule(ctxb, scheduler.Instance{Task: "flaky", ID: "1"}, time.Now())
		testdb.WaitFor(t, "the dead letter", func() bool { return dead.Load() != nil })
		testdb.WaitFor(t, "the removal", func() bool { return row(t, s.Client, "flaky", "1") == nil })
		f := dead.Load()
		if calls.Load() != 3 || f.Execution.ConsecutiveFailures != 2 || f.Err.Error() != "boom" {
			t.Fatalf("calls %d, dead letter %+v", calls.Load(), f)
		}
	})
}

func TestAFailureRecordsLastFailureAndConsecutiveFailures(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, b testdb.Backend) {
		task := scheduler.OneTime("fail", func(ctx context.Context, e *scheduler.Execution) error { return errors.New("no") },
			scheduler.OnFailure(scheduler.RetryAfter(time.Hour)))
		cfg := newTable(t, b, task)
		s := start(t, b, cfg)
		s.Schedule(ctxb, scheduler.Instance{Task: "fail", ID: "1"}, time.Now())
		testdb.WaitFor(t, "the failure", func() bool {
			e := row(t, s.Client, "fail", "1")
			return e != nil && e.ConsecutiveFailures == 1
		})
		e := row(t, s.Client, "fail", "1")
		if e.Picked || e.PickedBy != "" || e.LastFailure.IsZero() || !e.LastSuccess.IsZero() || time.Until(e.Time) < 50*time.Minute {
			t.Fatalf("after a failure retried in an hour: %+v", e)
		}
	})
}

func TestAPanickingHandlerIsAFailure(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, b testdb.Backend) {
		var got atomic.Pointer[error]
		task := scheduler.OneTime("panic", func(ctx context.Context, e *scheduler.Execution) error { panic("oops") },
			scheduler.OnFailure(func(ctx context.Context, f scheduler.Failure) scheduler.Completion {
				got.Store(&f.Err)
				return scheduler.Remove()
			}))
		s := start(t, b, newTable(t, b, task))
		s.Schedule(ctxb, scheduler.Instance{Task: "panic", ID: "1"}, time.Now())
		testdb.WaitFor(t, "the failure handler", func() bool { return got.Load() != nil })
		if !errors.Is(*got.Load(), scheduler.ErrPanic) {
			t.Fatalf("error %v, want ErrPanic", *got.Load())
		}
	})
}

func TestACustomTaskReplacesItselfWithTheNextStepOfAJobChain(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, b testdb.Backend) {
		r := newRuns()
		step1 := scheduler.Custom("step1", func(ctx context.Context, e *scheduler.Execution) (scheduler.Completion, error) {
			var n int
			if err := e.Decode(&n); err != nil {
				return scheduler.Completion{}, err
			}
			return scheduler.Replace(scheduler.Instance{Task: "step2", ID: e.Instance, Data: n + 1}, time.Now()), nil
		})
		cfg := newTable(t, b, step1, recorder("step2", r))
		s := start(t, b, cfg)
		s.Schedule(ctxb, scheduler.Instance{Task: "step1", ID: "order-7", Data: 1}, time.Now())
		testdb.WaitFor(t, "step 2", func() bool { return r.count("order-7") == 1 })
		if r.data["order-7"] != "2" || row(t, s.Client, "step1", "order-7") != nil {
			t.Fatalf("step 2 data %s; step 1 row left: %v", r.data["order-7"], row(t, s.Client, "step1", "order-7"))
		}
	})
}

func TestUnknownTaskNamesAreNeitherPickedNorDeleted(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, b testdb.Backend) {
		r := newRuns()
		cfg := newTable(t, b, recorder("known", r))
		c := newClient(t, b, scheduler.Config{Table: cfg.Table})
		c.Schedule(ctxb, scheduler.Instance{Task: "other", ID: "1"}, time.Now().Add(-30*24*time.Hour))
		s := start(t, b, cfg)
		for i := range 3 { // three fetches that pass the unknown row by
			s.Schedule(ctxb, scheduler.Instance{Task: "known", ID: fmt.Sprint(i)}, time.Now())
			testdb.WaitFor(t, "the known execution", func() bool { return r.count(fmt.Sprint(i)) == 1 })
		}
		if e := row(t, c, "other", "1"); e == nil || e.Picked || e.Version != 1 {
			t.Fatalf("the unknown task's execution: %+v", e)
		}
	})
}

func TestPriorityRunsHigherPrioritiesFirst(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, b testdb.Backend) {
		var order []string
		done := make(chan struct{})
		task := scheduler.OneTime("p", func(ctx context.Context, e *scheduler.Execution) error {
			order = append(order, e.Instance)
			if len(order) == 3 {
				close(done)
			}
			return nil
		})
		cfg := newTable(t, b, task)
		cfg.Priority, cfg.Threads, cfg.FetchLimit = true, 1, 1
		c := newClient(t, b, cfg)
		now := time.Now()
		c.Schedule(ctxb, scheduler.Instance{Task: "p", ID: "low", Priority: scheduler.PriorityLow}, now.Add(-3*time.Second))
		c.Schedule(ctxb, scheduler.Instance{Task: "p", ID: "high", Priority: scheduler.PriorityHigh}, now.Add(-time.Second))
		c.Schedule(ctxb, scheduler.Instance{Task: "p", ID: "medium"}, now.Add(-2*time.Second))
		start(t, b, cfg)
		<-done
		if fmt.Sprint(order) != "[high medium low]" {
			t.Fatalf("order %v", order)
		}
	})
}

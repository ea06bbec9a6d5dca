package scheduler_test

import (
	"context"
	"testing"
	"time"

	"github.com/lockreg/lockreg/internal/testdb"
	"github.com/lockreg/lockreg/jdbc"
	"github.com/lockreg/lockreg/jdbc/pgxlisten"
	"github.com/lockreg/lockreg/jdbc/pqlisten"
	"github.com/lockreg/lockreg/scheduler"
)

// An hour's poll: in these tests only a wake-up can run an execution.
const noPoll = time.Hour

func TestASchedulerWakesAtTheNextDueTimeItKnowsWithoutPolling(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, b testdb.Backend) {
		r := newRuns()
		cfg := newTable(t, b, recorder("t", r))
		cfg.PollInterval = noPoll
		newClient(t, b, cfg).Schedule(ctxb, scheduler.Instance{Task: "t", ID: "soon"}, time.Now().Add(300*time.Millisecond))
		start(t, b, cfg)
		testdb.WaitFor(t, "the execution due in 300 ms", func() bool { return r.count("soon") == 1 })
	})
}

func TestAScheduleInTheSameProcessWakesTheScheduler(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, b testdb.Backend) {
		r := newRuns()
		cfg := newTable(t, b, recorder("t", r))
		cfg.PollInterval = noPoll
		s := start(t, b, cfg)
		s.Schedule(ctxb, scheduler.Instance{Task: "t", ID: "warm"}, time.Now())
		testdb.WaitFor(t, "the first execution", func() bool { return r.count("warm") == 1 })
		s.Schedule(ctxb, scheduler.Instance{Task: "t", ID: "1"}, time.Now())
		testdb.WaitFor(t, "the execution scheduled after the fetch", func() bool { return r.count("1") == 1 })
	})
}

// listeners are the PostgreSQL listeners of each driver.
func listener(t *testing.T, b testdb.Backend) jdbc.Listener {
	if b.Name == "postgres-pq" {
		return pqlisten.New(b.DSN)
	}
	return pgxlisten.New(b.DB)
}

func isPostgres(b testdb.Backend) bool { return b.Dialect == jdbc.Postgres }

func TestWithAListenerAScheduleFromAnotherProcessWakesTheScheduler(t *testing.T) {
	testdb.ForEachWhere(t, isPostgres, func(t *testing.T, b testdb.Backend) {
		r := newRuns()
		cfg := newTable(t, b, recorder("t", r))
		cfg.PollInterval, cfg.Listener = noPoll, listener(t, b)
		s := start(t, b, cfg)
		s.Schedule(ctxb, scheduler.Instance{Task: "t", ID: "warm"}, time.Now())
		testdb.WaitFor(t, "the first execution", func() bool { return r.count("warm") == 1 })
		other := testdb.OpenPool(t, b.Driver, b.DSN) // another process's pool: no local wake-up
		c, err := scheduler.NewClient(other, scheduler.Config{Table: cfg.Table, PollInterval: noPoll})
		if err != nil {
			t.Fatal(err)
		}
		tx, err := other.BeginTx(ctxb, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.ScheduleTx(ctxb, tx, scheduler.Instance{Task: "t", ID: "1"}, time.Now()); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		testdb.WaitFor(t, "the execution another process scheduled", func() bool { return r.count("1") == 1 })
	})
}

func TestWithAListenerAStoppingSchedulerHandsItsExecutionsToAnother(t *testing.T) {
	testdb.ForEachWhere(t, isPostgres, func(t *testing.T, b testdb.Backend) {
		bl := newBlocker()
		r := newRuns()
		cfgA := newTable(t, b, bl.task("job"))
		cfgA.Threads, cfgA.FetchLimit = 1, 1
		a, err := scheduler.New(b.DB, cfgA)
		if err != nil {
			t.Fatal(err)
		}
		a.Schedule(ctxb, scheduler.Instance{Task: "job", ID: "1"}, time.Now())
		if err := a.Start(ctxb); err != nil {
			t.Fatal(err)
		}
		receive(t, bl.started, "start on A")
		cfgB := cfgA
		cfgB.Tasks = []scheduler.Task{recorder("job", r)}
		cfgB.PollInterval, cfgB.Listener = noPoll, listener(t, b)
		start(t, b, cfgB) // its first fetch finds the execution picked by A
		ctx, cancel := context.WithTimeout(ctxb, 50*time.Millisecond)
		defer cancel()
		a.Stop(ctx)
		testdb.WaitFor(t, "B to run the execution A handed back", func() bool { return r.count("1") == 1 })
	})
}

func TestARecurringStoredTaskRunsByTheScheduleInItsData(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, b testdb.Backend) {
		got := make(chan string, 100)
		task := scheduler.RecurringStored("report", func(ctx context.Context, e *scheduler.Execution) error {
			var tenant string
			if err := e.Decode(&tenant); err != nil {
				return err
			}
			got <- tenant
			return nil
		})
		cfg := newTable(t, b, task)
		s := start(t, b, cfg)
		every := scheduler.Must(scheduler.FixedDelay(time.Millisecond))
		if err := s.ScheduleRecurring(ctxb, scheduler.Instance{Task: "report", ID: "tenant-1", Data: "acme"}, every); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if tenant := receive(t, got, "a run"); tenant != "acme" {
				t.Fatalf("data %q", tenant)
			}
		}
		e := row(t, s.Client, "report", "tenant-1")
		if e == nil || string(e.Data) != `{"schedule":"FIXED_DELAY|1ms","data":"acme"}` {
			t.Fatalf("the execution after two runs: %+v", e)
		}
	})
}

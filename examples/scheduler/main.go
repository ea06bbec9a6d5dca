// Command scheduler shows package scheduler on the embedded default,
// SQLite: two scheduler instances, standing for two replicas of a service,
// share one table and run a one-time task (a reminder with its data), a
// recurring task (a heartbeat report every 200 ms, once per period across
// both) and a job chain (an order that is charged, then shipped: each step
// replaces itself with the next in one transaction). The output shows
// which instance ran what; each execution runs once.
//
//	go run ./examples/scheduler
//	go run ./examples/scheduler -orders 10 -for 3s
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	_ "modernc.org/sqlite"

	"github.com/lockreg/lockreg/scheduler"
)

func main() {
	file := flag.String("db", filepath.Join(os.TempDir(), "lockreg-scheduler.db"), "SQLite file of the table")
	orders := flag.Int("orders", 3, "orders to put through the job chain")
	runFor := flag.Duration("for", 2*time.Second, "how long the recurring task runs")
	flag.Parse()
	if err := run(context.Background(), os.Stdout, *file, *orders, *runFor); err != nil {
		log.Fatal(err)
	}
}

// Order is the data of the job chain's executions.
type Order struct {
	ID     string `json:"id"`
	Amount int    `json:"amount"`
}

func run(ctx context.Context, out io.Writer, file string, orders int, runFor time.Duration) error {
	db, err := sql.Open("sqlite", "file:"+file+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	if err != nil {
		return err
	}
	defer db.Close()
	// A table of this run's own, so that executions an earlier run left
	// in the file do not show up here.
	table := fmt.Sprintf("example_tasks_%d", time.Now().UnixNano())
	base := scheduler.Config{Table: table, PollInterval: 100 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if err := scheduler.CreateSchema(ctx, db, base); err != nil {
		return err
	}
	defer db.ExecContext(context.Background(), `DROP TABLE `+table)

	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, format+"\n", args...)
	}
	done := make(chan string, 2*orders+1)
	tasks := func(instance string) []scheduler.Task {
		return []scheduler.Task{
			scheduler.OneTime("send-reminder", func(ctx context.Context, e *scheduler.Execution) error {
				var to string
				if err := e.Decode(&to); err != nil {
					return err
				}
				say("%s: send-reminder to %s", instance, to)
				done <- "reminder"
				return nil
			}),
			scheduler.Recurring("report", scheduler.Must(scheduler.FixedDelay(200*time.Millisecond)),
				func(ctx context.Context, e *scheduler.Execution) error {
					say("%s: report (recurring, version %d)", instance, e.Version)
					return nil
				}),
			scheduler.Custom("charge", func(ctx context.Context, e *scheduler.Execution) (scheduler.Completion, error) {
				var o Order
				if err := e.Decode(&o); err != nil {
					return scheduler.Completion{}, err
				}
				say("%s: charge %s (%d)", instance, o.ID, o.Amount)
				// The next step replaces this one in the same transaction.
				return scheduler.Replace(scheduler.Instance{Task: "ship", ID: e.Instance, Data: o}, time.Now()), nil
			}),
			scheduler.OneTime("ship", func(ctx context.Context, e *scheduler.Execution) error {
				var o Order
				if err := e.Decode(&o); err != nil {
					return err
				}
				say("%s: ship %s", instance, o.ID)
				done <- "shipped"
				return nil
			}),
		}
	}
	var all []*scheduler.Scheduler
	for _, name := range []string{"instance-a", "instance-b"} {
		cfg := base
		cfg.Name, cfg.Tasks = name, tasks(name)
		s, err := scheduler.New(db, cfg)
		if err != nil {
			return err
		}
		if err := s.Start(ctx); err != nil {
			return err
		}
		all = append(all, s)
	}
	defer func() {
		for _, s := range all {
			stop, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			s.Stop(stop)
			cancel()
		}
	}()

	c := all[0].Client
	if err := c.Schedule(ctx, scheduler.Instance{Task: "send-reminder", ID: "user-1", Data: "ada@example.com"},
		time.Now().Add(300*time.Millisecond)); err != nil {
		return err
	}
	for i := range orders {
		id := fmt.Sprintf("order-%d", i+1)
		if err := c.Schedule(ctx, scheduler.Instance{Task: "charge", ID: id, Data: Order{ID: id, Amount: 10 * (i + 1)}}, time.Now()); err != nil {
			return err
		}
	}
	deadline := time.After(runFor)
	for range orders + 1 {
		select {
		case <-done:
		case <-time.After(time.Minute):
			return fmt.Errorf("the executions did not all run within a minute")
		}
	}
	<-deadline
	return nil
}

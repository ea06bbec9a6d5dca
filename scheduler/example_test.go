package scheduler_test

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	_ "modernc.org/sqlite"

	"github.com/lockreg/lockreg/scheduler"
)

// openExampleDB opens an SQLite file in a temporary folder, removed by the
// returned function.
func openExampleDB() (*sql.DB, func()) {
	dir, err := os.MkdirTemp("", "scheduler-example")
	if err != nil {
		log.Fatal(err)
	}
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "tasks.db")+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	if err != nil {
		log.Fatal(err)
	}
	return db, func() { db.Close(); os.RemoveAll(dir) }
}

func Example() {
	db, done := openExampleDB()
	defer done()
	ctx := context.Background()
	if err := scheduler.CreateSchema(ctx, db, scheduler.Config{}); err != nil {
		log.Fatal(err)
	}
	sent := make(chan string)
	reminder := scheduler.OneTime("send-reminder", func(ctx context.Context, e *scheduler.Execution) error {
		var to string
		if err := e.Decode(&to); err != nil {
			return err
		}
		sent <- to
		return nil
	})
	s, err := scheduler.New(db, scheduler.Config{Tasks: []scheduler.Task{reminder},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		log.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer s.Stop(ctx)
	err = s.Schedule(ctx, scheduler.Instance{Task: "send-reminder", ID: "user-1", Data: "ada@example.com"}, time.Now())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("reminded", <-sent)
	// Output: reminded ada@example.com
}

func ExampleCustom() {
	db, done := openExampleDB()
	defer done()
	ctx := context.Background()
	if err := scheduler.CreateSchema(ctx, db, scheduler.Config{}); err != nil {
		log.Fatal(err)
	}
	shipped := make(chan string)
	// A job chain: charging an order schedules its shipping in the same
	// transaction that removes the charge step.
	charge := scheduler.Custom("charge", func(ctx context.Context, e *scheduler.Execution) (scheduler.Completion, error) {
		return scheduler.Replace(scheduler.Instance{Task: "ship", ID: e.Instance, Data: e.Data}, time.Now()), nil
	})
	ship := scheduler.OneTime("ship", func(ctx context.Context, e *scheduler.Execution) error {
		shipped <- e.Instance
		return nil
	})
	s, err := scheduler.New(db, scheduler.Config{Tasks: []scheduler.Task{charge, ship}})
	if err != nil {
		log.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer s.Stop(ctx)
	if err := s.Schedule(ctx, scheduler.Instance{Task: "charge", ID: "order-7"}, time.Now()); err != nil {
		log.Fatal(err)
	}
	fmt.Println("shipped", <-shipped)
	// Output: shipped order-7
}

func ExampleParse() {
	for _, text := range []string{"FIXED_DELAY|30s", "DAILY|12:30,15:30|Europe/Rome", "-", "HOURLY"} {
		s, err := scheduler.Parse(text)
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Println(s)
	}
	// Output:
	// FIXED_DELAY|30s
	// DAILY|12:30,15:30|Europe/Rome
	// -
	// scheduler: invalid schedule: "HOURLY": want FIXED_DELAY|<n>s, DAILY|HH:MM[,HH:MM...][|Zone] or -
}

func ExampleClient_ScheduleTx() {
	db, done := openExampleDB()
	defer done()
	ctx := context.Background()
	if err := scheduler.CreateSchema(ctx, db, scheduler.Config{}); err != nil {
		log.Fatal(err)
	}
	c, err := scheduler.NewClient(db, scheduler.Config{})
	if err != nil {
		log.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	// ... the business change in tx ...
	if err := c.ScheduleTx(ctx, tx, scheduler.Instance{Task: "invoice", ID: "order-7"}, time.Now().Add(24*time.Hour)); err != nil {
		log.Fatal(err)
	}
	tx.Rollback() // the business change failed: no job either
	_, err = c.Get(ctx, "invoice", "order-7")
	fmt.Println(err)
	// Output: scheduler: execution not found: invoice/order-7
}

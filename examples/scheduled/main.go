// Command scheduled shows two schedulers, standing for two instances of a
// service, each firing the same task every second with a plain time.Ticker;
// a task lock (package tasklock) lets one of them run each tick and makes
// the other skip it. The output shows each tick run once.
//
// The lock table lives in an SQLite file by default, so no server is needed:
//
//	go run ./examples/scheduled
//	go run ./examples/scheduled -ticks 10 -interval 500ms
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"sync"
	"time"

	_ "modernc.org/sqlite"

	"github.com/lockreg/lockreg/jdbc"
	"github.com/lockreg/lockreg/tasklock"
)

func main() {
	file := flag.String("db", filepath.Join(os.TempDir(), "lockreg-scheduled.db"), "SQLite file of the lock table")
	interval := flag.Duration("interval", time.Second, "how often the task is due")
	ticks := flag.Int("ticks", 5, "ticks per scheduler")
	flag.Parse()
	if err := run(context.Background(), os.Stdout, *file, *interval, *ticks); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, out io.Writer, file string, interval time.Duration, ticks int) error {
	db, err := sql.Open("sqlite", "file:"+file+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	if err != nil {
		return err
	}
	defer db.Close()
	if err := jdbc.CreateSchema(ctx, db); err != nil {
		return err
	}
	// A task name of this run's own, so that a lock left in the file by an
	// earlier run (lockAtLeastFor) does not make the first tick skip.
	task := fmt.Sprintf("report-%d", time.Now().UnixNano())

	var (
		wg    sync.WaitGroup
		mu    sync.Mutex // orders the output lines
		errs  = make(chan error, 2)
		start = time.Now()
	)
	for _, name := range []string{"scheduler-A", "scheduler-B"} {
		// One repository per instance: each has its own client id.
		repo, err := jdbc.NewLockRepository(ctx, db)
		if err != nil {
			return err
		}
		e, err := tasklock.New(repo)
		if err != nil {
			return err
		}
		defer e.Close(context.Background())
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTicker(interval)
			defer t.Stop()
			for range ticks {
				<-t.C
				// The tick's number, for the output only: the lock, not
				// this clock, decides who runs.
				tick := int((time.Since(start) + interval/2) / interval)
				ran, err := e.Run(ctx, task, func(ctx context.Context) error {
					mu.Lock()
					defer mu.Unlock()
					fmt.Fprintf(out, "tick %d: %s runs the report\n", tick, name)
					return nil
				},
					tasklock.LockAtMostFor(10*interval),
					// Shorter than the interval: the other scheduler's tick,
					// a moment later, skips; the next tick runs.
					tasklock.LockAtLeastFor(interval*8/10))
				if err != nil {
					errs <- err
					return
				}
				if !ran {
					mu.Lock()
					fmt.Fprintf(out, "tick %d: %s skips (ran elsewhere)\n", tick, name)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// Command leader shows leader election: three instances of a service, each
// with a candidate for the role "report-scheduler" (package leader) and a
// gocron scheduler that runs the report job only while its instance leads
// (package leader/gocronleader). Each leader runs the report a few times
// and yields; another instance takes over with a greater fencing token.
// After the last term the instances shut down.
//
// The lock table lives in an SQLite file by default, so no server is
// needed; with -dsn it is on PostgreSQL, where a release wakes the next
// candidate at once through LISTEN/NOTIFY:
//
//	go run ./examples/leader
//	go run ./examples/leader -terms 5 -runs 2 -interval 100ms
//	go run ./examples/leader -dsn 'postgres://postgres@127.0.0.1:5432/test?sslmode=disable'
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/go-co-op/gocron/v2"
	_ "github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite"

	"github.com/lockreg/lockreg/jdbc"
	"github.com/lockreg/lockreg/jdbc/pgxlisten"
	"github.com/lockreg/lockreg/leader"
	"github.com/lockreg/lockreg/leader/gocronleader"
	"github.com/lockreg/lockreg/registry"
)

func main() {
	file := flag.String("db", filepath.Join(os.TempDir(), "lockreg-leader.db"), "SQLite file of the lock table")
	dsn := flag.String("dsn", "", "PostgreSQL DSN (pgx), instead of the SQLite file")
	terms := flag.Int("terms", 4, "terms of leadership to run")
	runs := flag.Int("runs", 3, "report runs per term")
	interval := flag.Duration("interval", 200*time.Millisecond, "how often the report is due")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	driver, source := "sqlite", "file:"+*file+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)"
	if *dsn != "" {
		driver, source = "pgx", *dsn
	}
	if err := run(ctx, os.Stdout, driver, source, *terms, *runs, *interval); err != nil {
		log.Fatal(err)
	}
}

// instance is one instance of the service.
type instance struct {
	name  string
	locks *registry.Registry
	c     *leader.Candidate
	s     gocron.Scheduler
}

func run(ctx context.Context, out io.Writer, driver, dsn string, terms, runs int, interval time.Duration) (err error) {
	db, err := sql.Open(driver, dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := jdbc.CreateSchema(ctx, db); err != nil {
		return err
	}
	// A region of this run's own, so that a lease left in the file by an
	// earlier run that was killed does not delay this one.
	region := fmt.Sprintf("leader-example-%d", time.Now().UnixNano())

	var (
		mu      sync.Mutex // orders the output and guards what follows
		granted int        // terms granted so far
		last    = make(chan struct{})
	)
	say := func(format string, args ...any) {
		fmt.Fprintf(out, format+"\n", args...)
	}
	var instances []*instance
	defer func() {
		// Schedulers first, so that no job runs during the shutdown;
		// then the followers, and the leader last, so that no follower
		// is granted the leadership the leader releases.
		var errs []error
		for _, in := range instances {
			errs = append(errs, in.s.Shutdown())
		}
		for _, in := range instances {
			if !in.c.IsLeader() {
				errs = append(errs, in.c.Close(ctx))
			}
		}
		for _, in := range instances {
			errs = append(errs, in.c.Close(ctx), in.locks.Close(ctx))
		}
		err = errors.Join(append(errs, err)...)
	}()
	for _, name := range []string{"instance-A", "instance-B", "instance-C"} {
		in := &instance{name: name}
		opts := []jdbc.Option{jdbc.WithRegion(region)}
		if driver == "pgx" {
			opts = append(opts, jdbc.WithListener(pgxlisten.New(db)))
		}
		// One repository per instance: each has its own client id.
		repo, err := jdbc.NewLockRepository(ctx, db, opts...)
		if err != nil {
			return err
		}
		if in.locks, err = registry.New(repo); err != nil {
			return err
		}
		var (
			ran int          // report runs in the current term, guarded by mu
			cur *leader.Term // the term OnGranted announced, guarded by mu
		)
		in.c, err = leader.New(in.locks, "report-scheduler",
			leader.WithTTL(5*time.Second),
			leader.WithBusyWait(2*interval), // after yielding: time for another to lead
			leader.OnGranted(func(t *leader.Term) {
				mu.Lock()
				defer mu.Unlock()
				granted++
				ran, cur = 0, t
				say("%s leads (term %d, token %d)", name, granted, t.Token())
			}),
			leader.OnRevoked(func(t *leader.Term) {
				mu.Lock()
				defer mu.Unlock()
				why := "lost its lease"
				switch cause := context.Cause(t.Context()); {
				case errors.Is(cause, leader.ErrYielded):
					why = "yielded"
				case errors.Is(cause, leader.ErrClosed):
					why = "shut down"
				}
				say("%s stops leading: %s", name, why)
			}))
		if err != nil {
			return err
		}
		in.s, err = gocron.NewScheduler(gocron.WithDistributedElector(gocronleader.New(in.c)))
		if err != nil {
			return err
		}
		instances = append(instances, in)
		_, err = in.s.NewJob(gocron.DurationJob(interval), gocron.NewTask(func() {
			t := in.c.Term() // the elector let the job run, but the term may just have ended
			if t == nil {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case t != cur:
				return // OnGranted, which runs beside the term, has not announced it yet
			case ran == runs:
				return // the last term, shutting down
			}
			ran++
			say("%s runs the report (token %d)", name, t.Token())
			switch {
			case ran < runs:
			case granted == terms:
				close(last)
			default:
				t.Yield()
			}
		}), gocron.WithName("report"), gocron.WithSingletonMode(gocron.LimitModeReschedule))
		if err != nil {
			return err
		}
		in.s.Start()
	}
	select {
	case <-last:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

//go:build chaos

package chaos

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lockreg/lockreg/internal/dbscheduler"
	"github.com/lockreg/lockreg/jdbc"
	"github.com/lockreg/lockreg/scheduler"
)

// Two Go scheduler processes and two processes replaying Java
// db-scheduler's statements (package internal/dbscheduler) share one
// table: on PostgreSQL one Java node fetches (FETCH) and one locks and
// fetches (LOCK_AND_FETCH), on MariaDB and SQLite both fetch; on MariaDB
// the JVM's zone is Europe/Rome without alwaysPersistTimestampInUTC(), and
// Go is given it as TimeZone; on SQLite the processes share a file. They
// run one-time executions the parent schedules while they run, half
// through Go's client and half through Java's scheduleIfNotExists, and a
// recurring task only Go knows; one Java process is killed with SIGKILL
// while it holds executions. No pick version is run twice, every
// execution runs and its success is recorded once, the killed node's
// executions are revived and run again, nothing is left picked, and the
// Go-only task's row is neither run by Java nor deleted (the Java nodes
// have deleteUnresolvedAfter set very long, as the README's interop row
// says they must).
func TestGoAndJavaSchedulerProcessesShareATableThroughAKill(t *testing.T) {
	for _, b := range allBackends(t) {
		t.Run(b.Name, func(t *testing.T) {
			b.Require(t)
			var zone *time.Location
			if b.Dialect == jdbc.MySQL {
				var err error
				if zone, err = time.LoadLocation("Europe/Rome"); err != nil {
					t.Fatal(err)
				}
			}
			began := time.Now()
			c := newZonedSchedCluster(t, b, zone)
			c.vacuum()
			// The Java handlers work longer, so that a Java node is caught
			// holding executions (Go's, woken by NOTIFY on PostgreSQL,
			// take most of them).
			const work, javaWork = 10 * time.Millisecond, 50 * time.Millisecond
			c.start(0, "FIXED_DELAY|200ms", work)
			c.start(1, "FIXED_DELAY|200ms", work)
			strategy := map[int]string{2: "fetch", 3: "fetch"}
			if b.Dialect == jdbc.Postgres {
				strategy[2] = "lock-and-fetch"
			}
			for i := 2; i < 4; i++ {
				c.startChild(i, "dbscheduler", javaWork, strategyEnv+"="+strategy[i])
			}
			java := c.javaNode("chaos-java-client", false)

			const batches = 30
			n := scale(3000)
			if b.Dialect == jdbc.SQLite {
				n = scale(1200) // the race detector slows SQLite's transpiled C about tenfold
			}
			per := n / batches
			var held []*scheduler.Execution
			killed := false
			for k := range batches {
				c.scheduleBatch(k*per, per/2)
				for i := per / 2; i < per; i++ {
					c.retry(fmt.Sprintf("scheduling %d through Java", k*per+i), func(ctx context.Context) error {
						_, err := java.Schedule(ctx, schedOnce, fmt.Sprintf("i%06d", k*per+i), []byte("null"), time.Now())
						return err
					})
				}
				time.Sleep(50 * time.Millisecond)
				// From the tenth batch on, watch the Java node for two seconds
				// after each until it is caught holding executions.
				for deadline := time.Now().Add(2 * time.Second); k >= batches/3 && !killed && time.Now().Before(deadline); {
					if held, killed = c.killHolding(2, "chaos-java-2"); !killed {
						time.Sleep(5 * time.Millisecond)
					}
				}
			}
			if killed && len(held) == 0 {
				t.Error("the killed Java process held no execution once its last statements had ended")
			}
			if !killed {
				t.Fatalf("Java process 2 held no execution while %d batches were scheduled\n%s", batches-batches/3, c.proc(2).tail())
			}
			runs, ticks := c.finish(n)
			revivers := c.checkRevived(runs, held, 2)
			if tick := c.list(scheduler.Filter{Task: schedTick}); len(tick) != 1 {
				t.Errorf("the Go-only recurring task has %d executions, want its one row", len(tick))
			}
			byProc := map[int]int{}
			for _, r := range runs {
				byProc[r.proc]++
				if r.task == schedTick && r.proc >= 2 {
					t.Errorf("Java process %d ran the Go-only task (version %d)", r.proc, r.version)
				}
			}
			t.Logf("%s in %v: %d executions (%s), %d runs by process (0, 1 Go; 2, 3 Java %s, %s) %v, %d of the recurring task; "+
				"the killed Java process held %d, revived by %v; %s",
				b.Name, time.Since(began).Round(time.Second), n, "half scheduled by each side", len(runs), strategy[2], strategy[3],
				byProc, ticks, len(held), revivers, c.summary())
		})
	}
}

// Settings of the Java nodes: heartbeatInterval at least Go's (the
// README's interop row), so that a Java node's dead execution is found by
// Go (four seconds by the database's clock) before the Java nodes would
// find it (eight by theirs).
const (
	strategyEnv   = "LOCKREG_CHAOS_STRATEGY" // "fetch" or "lock-and-fetch"
	javaHeartbeat = 2 * time.Second
)

// javaNode is a db-scheduler node on the cluster's table, in the JVM's
// zone the Go side was given, that knows the one-time task only and never
// deletes the executions of names it cannot resolve.
func (c *schedCluster) javaNode(name string, lockAndFetch bool) *dbscheduler.Node {
	return newJavaNode(c.b.Dialect, c.b.DB, c.table, name, c.zone, lockAndFetch)
}

// newJavaNode is the Java node of a db-scheduler child or of the parent.
func newJavaNode(d jdbc.Dialect, db *sql.DB, table, name string, zone *time.Location, lockAndFetch bool) *dbscheduler.Node {
	return &dbscheduler.Node{Dialect: d, DB: db, Table: table, Name: name, Zone: zone, LockAndFetch: lockAndFetch,
		Tasks: []string{schedOnce}, HeartbeatInterval: javaHeartbeat, MissedHeartbeats: schedMissed,
		DeleteUnresolvedAfter: 36500 * 24 * time.Hour, RetryDelay: 100 * time.Millisecond}
}

// killHolding kills process i (picked_by name) with SIGKILL if it holds
// executions, and returns the executions it held when it died and
// whether it killed it. It stops the process with SIGSTOP first and reads
// what it holds once the statements it sent have ended, so that a run
// completing between the read and the kill (its handler takes 50 ms, a
// loaded machine's read can take longer) cannot leave the kill holding
// nothing; a process found holding nothing is resumed.
func (c *schedCluster) killHolding(i int, name string) ([]*scheduler.Execution, bool) {
	c.t.Helper()
	holds := func(e *scheduler.Execution) bool { return e.PickedBy == name }
	if !slices.ContainsFunc(c.list(scheduler.Filter{State: scheduler.Picked}), holds) {
		return nil, false // not worth stopping it
	}
	held := c.freeze(i, name)
	if len(held) == 0 {
		if err := c.proc(i).cmd.Process.Signal(syscall.SIGCONT); err != nil {
			c.t.Fatal(err)
		}
		return nil, false
	}
	c.kill(i)
	return held, true
}

// checkRevived checks each execution the killed process held: one that
// a process reports reviving ran again, under a later version; one that
// none revived was completed by the killed process's own completion
// (a statement the server was still running, behind a lock, when the
// process died), after its run under the version it held. It returns how
// many each process revived (-1: completed by the killed one).
func (c *schedCluster) checkRevived(runs []*schedRun, held []*scheduler.Execution, killed int) map[int]int {
	c.t.Helper()
	revivers := map[int]int{}
	for _, h := range held {
		by := -1
		for i := range 8 {
			if p := c.proc(i); p != nil {
				p.mu.Lock()
				if slices.Contains(p.revived, fmt.Sprintf("%s %s %d %s", h.Task, h.Instance, h.Version, h.PickedBy)) {
					by = i
				}
				p.mu.Unlock()
			}
		}
		revivers[by]++
		ran := func(ok func(r *schedRun) bool) bool {
			return slices.ContainsFunc(runs, func(r *schedRun) bool { return r.task == h.Task && r.inst == h.Instance && ok(r) })
		}
		switch {
		case by >= 0 && !ran(func(r *schedRun) bool { return r.version > h.Version }):
			c.t.Errorf("execution %s %s, held by the killed process at version %d and revived by process %d, did not run again",
				h.Task, h.Instance, h.Version, by)
		case by < 0 && !ran(func(r *schedRun) bool { return r.version == h.Version && r.proc == killed }):
			c.t.Errorf("execution %s %s, held by the killed process at version %d, is gone, yet no process revived it and the killed one never ran it",
				h.Task, h.Instance, h.Version)
		}
	}
	return revivers
}

// childDBScheduler is the body of a db-scheduler child (mode
// "dbscheduler"): a Java node of package dbscheduler on the table in
// tableEnv, with the strategy in strategyEnv and the JVM's zone in
// zoneEnv, that knows the one-time task only. Its handler is the Go
// children's (recordRun). It polls (at once again after a poll that ran
// something, else after 100 ms), heartbeats the executions it runs every
// javaHeartbeat and looks for dead ones every two, as Java's housekeeper
// does, and reports in the scheduler children's lines. When its standard
// input closes it stops polling and ends once the executions it picked
// are complete, leaving none picked.
func childDBScheduler() error {
	c, err := readSchedChild()
	if err != nil {
		return err
	}
	defer c.b.DB.Close()
	report := c.report
	node := newJavaNode(c.b.Dialect, c.b.DB, os.Getenv(tableEnv), fmt.Sprintf("chaos-java-%d", c.proc), c.zone,
		os.Getenv(strategyEnv) == "lock-and-fetch")
	node.Threads = c.workers
	stop := make(chan struct{})
	go func() {
		io.Copy(io.Discard, os.Stdin) // until the parent closes it
		close(stop)
	}()
	ctx := context.Background()
	logErr := func(what string, err error) {
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", what, err)
		}
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		every(stop, javaHeartbeat, func() {
			_, err := node.Heartbeat(ctx)
			logErr("heartbeat", err)
		})
	})
	wg.Go(func() {
		every(stop, 2*javaHeartbeat, func() {
			_, err := node.DeleteUnresolved(ctx)
			logErr("delete unresolved", err)
			revived, err := node.ReviveDead(ctx)
			logErr("dead executions", err)
			for _, e := range revived {
				report("revived %s %s %d %s", e.Task, e.Instance, e.Version, e.PickedBy)
			}
		})
	})
	report("ready")
	run := func(ctx context.Context, e *dbscheduler.Execution) error {
		return c.recordRun(ctx, e.Task, e.Instance, e.Version, e.Time)
	}
	for {
		picked, err := node.Poll(ctx, run)
		logErr("poll", err)
		for _, e := range picked {
			switch {
			case e.Completion == dbscheduler.ErrNotCompleted:
				report("outcome refused %s %s %d", e.Task, e.Instance, e.Version)
			case e.Completion != nil:
				logErr("completion of "+e.String(), e.Completion)
				report("outcome unrecorded %s %s %d", e.Task, e.Instance, e.Version)
			case e.Err != nil:
				report("outcome failed %s %s %d", e.Task, e.Instance, e.Version)
			}
		}
		wait := time.Duration(0)
		if len(picked) == 0 {
			wait = 100 * time.Millisecond
		}
		select {
		case <-stop:
			wg.Wait()
			if names := node.Unresolved(); len(names) > 0 {
				fmt.Fprintf(os.Stderr, "unresolved task names: %s\n", strings.Join(names, " "))
			}
			report("stopped <nil>")
			return nil
		case <-time.After(wait):
		}
	}
}

// every runs f at once and then every d until stop closes.
func every(stop <-chan struct{}, d time.Duration, f func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		f()
		select {
		case <-stop:
			return
		case <-t.C:
		}
	}
}

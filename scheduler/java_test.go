package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lockreg/lockreg/internal/dbscheduler"
	"github.com/lockreg/lockreg/internal/testdb"
	"github.com/lockreg/lockreg/jdbc"
	"github.com/lockreg/lockreg/scheduler"
)

// javaNode is a replay of a Java db-scheduler node on cfg's table (see
// package internal/dbscheduler) that knows every task name.
func javaNode(b testdb.Backend, cfg scheduler.Config, name string, loc *time.Location, lock bool) *dbscheduler.Node {
	return &dbscheduler.Node{Dialect: b.Dialect, DB: b.DB, Table: cfg.Table, Name: name, Zone: loc, LockAndFetch: lock}
}

// javaPoll is one Poll of j running each execution with run; a completion
// that failed fails it.
func javaPoll(ctx context.Context, j *dbscheduler.Node, run func(e *dbscheduler.Execution)) ([]*dbscheduler.Execution, error) {
	picked, err := j.Poll(ctx, func(_ context.Context, e *dbscheduler.Execution) error { run(e); return nil })
	for _, e := range picked {
		if e.Completion != nil {
			err = errors.Join(err, fmt.Errorf("Java: completion of %v: %w", e, e.Completion))
		}
	}
	return picked, err
}

// strategies are the Java polling strategies of a backend: FETCH
// everywhere, LOCK_AND_FETCH (S5) on PostgreSQL.
func strategies(b testdb.Backend) []bool {
	if b.Dialect == jdbc.Postgres {
		return []bool{false, true}
	}
	return []bool{false}
}

func TestJavaAndGoSchedulersOnOneTableRunEachExecutionOnce(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, b testdb.Backend) {
		for _, lock := range strategies(b) {
			t.Run(map[bool]string{false: "fetch", true: "lock-and-fetch"}[lock], func(t *testing.T) {
				var mu sync.Mutex
				ran := map[string]int{}
				note := func(inst string) { mu.Lock(); ran[inst]++; mu.Unlock() }
				task := scheduler.OneTime("shared", func(ctx context.Context, e *scheduler.Execution) error { note(e.Instance); return nil })
				cfg := newTable(t, b, task)
				j := javaNode(b, cfg, "java-node-1", nil, lock)
				c := newClient(t, b, cfg)
				const n = 200
				for i := range n {
					var err error
					if i%2 == 0 {
						err = c.Schedule(ctxb, scheduler.Instance{Task: "shared", ID: fmt.Sprint(i), Data: i}, time.Now())
					} else {
						_, err = j.Schedule(ctxb, "shared", fmt.Sprint(i), []byte(fmt.Sprint(i)), time.Now())
					}
					if err != nil {
						t.Fatal(err)
					}
				}
				start(t, b, cfg)
				start(t, b, cfg)
				ctx, cancel := context.WithCancel(ctxb)
				defer cancel()
				var wg sync.WaitGroup
				var javaErr error
				wg.Add(1)
				go func() {
					defer wg.Done()
					for ctx.Err() == nil {
						if _, err := javaPoll(ctx, j, func(e *dbscheduler.Execution) { note(e.Instance) }); err != nil && ctx.Err() == nil {
							javaErr = err
							return
						}
					}
				}()
				testdb.WaitFor(t, "every execution", func() bool {
					all, _ := c.List(ctxb, scheduler.Filter{})
					return len(all) == 0
				})
				cancel()
				wg.Wait()
				if javaErr != nil {
					t.Fatal(javaErr)
				}
				for i := range n {
					if ran[fmt.Sprint(i)] != 1 {
						t.Errorf("execution %d ran %d times", i, ran[fmt.Sprint(i)])
					}
				}
			})
		}
	})
}

func TestGoReadsJavasTimesInTheJVMsZone(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, b testdb.Backend) {
		r := newRuns()
		cfg := newTable(t, b, recorder("t", r))
		loc := time.UTC
		if b.Dialect == jdbc.MySQL {
			// A JVM in Rome without alwaysPersistTimestampInUTC().
			loc = mustLoad(t, "Europe/Rome")
			cfg.TimeZone = loc
		}
		j := javaNode(b, cfg, "java", loc, false)
		at := time.Now().Add(time.Hour).Truncate(time.Millisecond)
		if _, err := j.Schedule(ctxb, "t", "later", []byte(`"x"`), at); err != nil {
			t.Fatal(err)
		}
		j.Schedule(ctxb, "t", "now", []byte(`"y"`), time.Now().Add(-time.Second))
		c := newClient(t, b, cfg)
		if e := row(t, c, "t", "later"); !e.Time.Equal(at) {
			t.Fatalf("Go reads Java's %v as %v", at, e.Time)
		}
		start(t, b, cfg)
		testdb.WaitFor(t, "the due Java execution", func() bool { return r.count("now") == 1 })
		if r.count("later") != 0 {
			t.Fatal("the execution Java scheduled in an hour ran")
		}
	})
}

func TestJavaFindsGosExecutionDueByItsOwnClock(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, b testdb.Backend) {
		cfg := newTable(t, b)
		loc := time.UTC
		if b.Dialect == jdbc.MySQL {
			loc = mustLoad(t, "America/New_York")
			cfg.TimeZone = loc
		}
		c := newClient(t, b, cfg)
		c.Schedule(ctxb, scheduler.Instance{Task: "t", ID: "now"}, time.Now().Add(-time.Second))
		c.Schedule(ctxb, scheduler.Instance{Task: "t", ID: "later"}, time.Now().Add(time.Hour))
		j := javaNode(b, cfg, "java", loc, false)
		var got []string
		if _, err := javaPoll(ctxb, j, func(e *dbscheduler.Execution) { got = append(got, e.Instance) }); err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got) != "[now]" {
			t.Fatalf("Java ran %v, want [now]", got)
		}
	})
}

func TestGoRevivesAJavaExecutionWhoseNodeDied(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, b testdb.Backend) {
		r := newRuns()
		cfg := newTable(t, b, recorder("t", r))
		// Dead after 5 s: far below the dead row's hour, far above what a loaded
		// machine delays this scheduler's own heartbeats (at 100 ms it revived them).
		cfg.HeartbeatInterval, cfg.MissedHeartbeats = 50*time.Millisecond, 100
		// A Java node whose clock reads an hour ago picks it (S4) and dies
		// in the handler, before its completion.
		j := javaNode(b, cfg, "java-dead", nil, false)
		j.Clock = func() time.Time { return time.Now().Add(-time.Hour) }
		j.Schedule(ctxb, "t", "1", []byte(`null`), time.Now().Add(-2*time.Hour))
		ctx, die := context.WithCancel(ctxb)
		if _, err := j.Poll(ctx, func(ctx context.Context, _ *dbscheduler.Execution) error { die(); return ctx.Err() }); err != nil {
			t.Fatal(err)
		}
		if e := row(t, newClient(t, b, cfg), "t", "1"); !e.Picked || e.PickedBy != "java-dead" {
			t.Fatalf("the dead Java node's execution: picked %v by %q", e.Picked, e.PickedBy)
		}
		start(t, b, cfg)
		testdb.WaitFor(t, "the revived execution", func() bool { return r.count("1") == 1 })
	})
}

// The README's interop row: a Java node with stock settings that sees a
// due row of a task name only Go runs blacklists the name and, once the
// first row it saw was due more than deleteUnresolvedAfter (14 days) ago,
// deletes every row of the name; with a long deleteUnresolvedAfter it
// leaves them. Neither strategy leaves the row picked (LOCK_AND_FETCH
// picks it and unpicks it, v16.12.0).
func TestJavaDeletesTheRowsOfAGoOnlyTaskUnlessDeleteUnresolvedAfterIsLong(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, b testdb.Backend) {
		for _, lock := range strategies(b) {
			for _, keep := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/long-delete-unresolved-after=%v", map[bool]string{false: "fetch", true: "lock-and-fetch"}[lock], keep), func(t *testing.T) {
					cfg := newTable(t, b)
					c := newClient(t, b, cfg)
					if err := c.Schedule(ctxb, scheduler.Instance{Task: "go-only", ID: "old"}, time.Now().Add(-15*24*time.Hour)); err != nil {
						t.Fatal(err)
					}
					c.Schedule(ctxb, scheduler.Instance{Task: "go-only", ID: "later"}, time.Now().Add(time.Hour))
					j := javaNode(b, cfg, "java", nil, lock)
					j.Tasks = []string{"shared"}
					if keep {
						j.DeleteUnresolvedAfter = 36500 * 24 * time.Hour
					}
					before := row(t, c, "go-only", "old").Version
					if picked, err := javaPoll(ctxb, j, func(*dbscheduler.Execution) {}); err != nil || len(picked) != 0 {
						t.Fatalf("Java ran %v (%v)", picked, err)
					}
					if fmt.Sprint(j.Unresolved()) != "[go-only]" {
						t.Fatalf("Java's unresolved names: %v", j.Unresolved())
					}
					if e := row(t, c, "go-only", "old"); e.Picked || (lock && e.Version != before+2) || (!lock && e.Version != before) {
						t.Fatalf("after Java's poll the Go-only row is picked %v at version %d (was %d)", e.Picked, e.Version, before)
					}
					deleted, err := j.DeleteUnresolved(ctxb)
					if err != nil {
						t.Fatal(err)
					}
					left, _ := c.List(ctxb, scheduler.Filter{Task: "go-only"})
					if keep && (deleted != 0 || len(left) != 2) || !keep && (deleted != 2 || len(left) != 0) {
						t.Fatalf("Java deleted %d rows of the Go-only task, %d left", deleted, len(left))
					}
				})
			}
		}
	})
}

// The README's interop row: a Java node revives an execution of a Go node
// it judges dead (here by a JVM clock an hour ahead of the database's,
// which Java trusts), with its S9; the Go node learns at its next
// heartbeat that the row was taken, cancels the handler with ErrLost, and
// its late completion is refused: the row stays as Java left it.
func TestJavaRevivesAGoExecutionItJudgesDeadAndGosLateCompletionIsRefused(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, b testdb.Backend) {
		bl := newBlocker()
		cfg := newTable(t, b, bl.task("job"))
		cfg.HeartbeatInterval = 50 * time.Millisecond
		s := start(t, b, cfg)
		s.Schedule(ctxb, scheduler.Instance{Task: "job", ID: "1"}, time.Now())
		e := receive(t, bl.started, "start")
		j := javaNode(b, cfg, "java", nil, false)
		j.HeartbeatInterval, j.MissedHeartbeats = time.Second, 4
		j.Clock = func() time.Time { return time.Now().Add(time.Hour) }
		revived, err := j.ReviveDead(ctxb)
		if err != nil || len(revived) != 1 || revived[0].Version != e.Version {
			t.Fatalf("Java revived %v (%v), want %s/%s version %d", revived, err, e.Task, e.Instance, e.Version)
		}
		if cause := receive(t, bl.causes, "cancellation"); !errors.Is(cause, scheduler.ErrLost) {
			t.Fatalf("cause %v, want ErrLost", cause)
		}
		// Stop waits for the handler and its (refused) completion.
		if err := s.Stop(ctxb); err != nil {
			t.Fatal(err)
		}
		now := row(t, s.Client, "job", "1")
		if now == nil || now.Picked || now.Version != e.Version+1 || now.ConsecutiveFailures != 1 {
			t.Fatalf("after Java's revive and Go's late completion: %+v", now)
		}
	})
}

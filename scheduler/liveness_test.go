package scheduler_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockreg/lockreg/internal/testdb"
	"github.com/lockreg/lockreg/jdbc"
	"github.com/lockreg/lockreg/scheduler"
)

func TestADeadExecutionIsRevivedByTheDatabasesClockAndRunsAgain(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, b testdb.Backend) {
		seen := make(chan *scheduler.Execution, 10)
		task := scheduler.OneTime("job", func(ctx context.Context, e *scheduler.Execution) error { seen <- e; return nil })
		cfg := newTable(t, b, task)
		// Dead after 5 s: far below the dead row's hour, far above what a loaded
		// machine delays this scheduler's own heartbeats (at 100 ms it revived them).
		cfg.HeartbeatInterval, cfg.MissedHeartbeats = 50*time.Millisecond, 100
		c := newClient(t, b, cfg)
		c.Schedule(ctxb, scheduler.Instance{Task: "job", ID: "1"}, time.Now())
		// A node that died an hour ago by the database's clock, 3 picks in.
		b.Exec(t, `UPDATE `+cfg.Table+` SET picked = true, picked_by = 'dead-node', version = 3, last_heartbeat = `+ago(b, time.Hour))
		start(t, b, cfg)
		e := receive(t, seen, "run of the revived execution")
		if e.ConsecutiveFailures != 1 || e.Version != 5 || e.PickedBy == "dead-node" {
			t.Fatalf("revived execution %+v: want 1 failure, version 5 (revive, pick)", e)
		}
		testdb.WaitFor(t, "the deletion", func() bool { return row(t, c, "job", "1") == nil })
	})
}

func TestAnExecutionWithARecentHeartbeatIsNotDead(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, b testdb.Backend) {
		cfg := newTable(t, b, recorder("job", newRuns()))
		cfg.HeartbeatInterval, cfg.MissedHeartbeats = 50*time.Millisecond, 2
		c := newClient(t, b, cfg)
		c.Schedule(ctxb, scheduler.Instance{Task: "job", ID: "1"}, time.Now())
		// Picked by a live node whose heartbeat the database dates a minute
		// ahead: a host clock behind would call it dead; the database's does not.
		b.Exec(t, `UPDATE `+cfg.Table+` SET picked = true, picked_by = 'live-node', version = 2, last_heartbeat = `+ago(b, -time.Minute))
		s := start(t, b, cfg)
		for i := range 3 { // dead checks run every heartbeat interval
			s.Schedule(ctxb, scheduler.Instance{Task: "job", ID: "other" + string(rune('a'+i))}, time.Now())
			time.Sleep(cfg.HeartbeatInterval)
		}
		testdb.WaitFor(t, "the other executions", func() bool {
			all, _ := c.List(ctxb, scheduler.Filter{})
			return len(all) == 1
		})
		if e := row(t, c, "job", "1"); !e.Picked || e.PickedBy != "live-node" || e.Version != 2 {
			t.Fatalf("the live node's execution was touched: %+v", e)
		}
	})
}

func TestHeartbeatsKeepALongExecutionPickedAndAdvanceItsHeartbeat(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, b testdb.Backend) {
		bl := newBlocker()
		cfg := newTable(t, b, bl.task("long"))
		cfg.HeartbeatInterval, cfg.MissedHeartbeats = 50*time.Millisecond, 100
		s := start(t, b, cfg)
		start(t, b, cfg) // a second scheduler that would revive it if it looked dead
		s.Schedule(ctxb, scheduler.Instance{Task: "long", ID: "1"}, time.Now())
		e := receive(t, bl.started, "start")
		testdb.WaitFor(t, "two heartbeats after the pick", func() bool {
			now := row(t, s.Client, "long", "1")
			return now.LastHeartbeat.After(e.LastHeartbeat.Add(2 * cfg.HeartbeatInterval))
		})
		if now := row(t, s.Client, "long", "1"); !now.Picked || now.Version != e.Version {
			t.Fatalf("while running: %+v, picked as %+v", now, e)
		}
		close(bl.release)
		testdb.WaitFor(t, "the completion", func() bool { return row(t, s.Client, "long", "1") == nil })
		select {
		case e := <-bl.started:
			t.Fatalf("ran twice: %+v", e)
		default:
		}
	})
}

func TestACompletionAfterTheExecutionWasTakenIsRefusedAndTheHandlerIsCancelled(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, b testdb.Backend) {
		bl := newBlocker()
		cfg := newTable(t, b, bl.task("job"))
		cfg.HeartbeatInterval = 50 * time.Millisecond
		s := start(t, b, cfg)
		s.Schedule(ctxb, scheduler.Instance{Task: "job", ID: "1"}, time.Now())
		e := receive(t, bl.started, "start")
		// Another node revives it (version + 1) and holds it elsewhere, alive:
		// its heartbeat a minute ahead keeps this scheduler's dead check (six
		// missed 50 ms heartbeats) from reviving it again while the test looks.
		b.Exec(t, `UPDATE `+cfg.Table+` SET picked = true, picked_by = 'other', version = version + 1, last_heartbeat = `+ago(b, -time.Minute))
		if cause := receive(t, bl.causes, "cancellation"); !errors.Is(cause, scheduler.ErrLost) {
			t.Fatalf("cause %v, want ErrLost", cause)
		}
		testdb.WaitFor(t, "the refused completion to leave the row", func() bool {
			all, _ := s.List(ctxb, scheduler.Filter{State: scheduler.Picked})
			return len(all) == 1
		})
		if now := row(t, s.Client, "job", "1"); now == nil || now.Version != e.Version+1 || now.PickedBy != "other" {
			t.Fatalf("after the zombie's completion: %+v", now)
		}
	})
}

func TestStopWaitsForRunningExecutionsAndRecordsTheirCompletion(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, b testdb.Backend) {
		bl := newBlocker()
		cfg := newTable(t, b, bl.task("job"))
		s, err := scheduler.New(b.DB, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Start(ctxb); err != nil {
			t.Fatal(err)
		}
		s.Schedule(ctxb, scheduler.Instance{Task: "job", ID: "1"}, time.Now())
		receive(t, bl.started, "start")
		stopped := make(chan error, 1)
		go func() { stopped <- s.Stop(ctxb) }()
		close(bl.release)
		if err := receive(t, stopped, "Stop"); err != nil {
			t.Fatal(err)
		}
		if e := row(t, s.Client, "job", "1"); e != nil {
			t.Fatalf("after Stop: %+v, want the completed execution deleted", e)
		}
	})
}

func TestStopUnpicksWhatItCouldNotFinishSoThatAnotherNodeRunsItAtOnce(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, b testdb.Backend) {
		bl := newBlocker()
		cfg := newTable(t, b, bl.task("job"))
		cfg.Threads, cfg.FetchLimit = 1, 3
		s, err := scheduler.New(b.DB, cfg)
		if err != nil {
			t.Fatal(err)
		}
		c := newClient(t, b, cfg)
		for _, id := range []string{"1", "2", "3"} {
			c.Schedule(ctxb, scheduler.Instance{Task: "job", ID: id}, time.Now())
		}
		if err := s.Start(ctxb); err != nil {
			t.Fatal(err)
		}
		receive(t, bl.started, "start") // one runs, two wait for the thread
		testdb.WaitFor(t, "all three picked", func() bool {
			all, _ := c.List(ctxb, scheduler.Filter{State: scheduler.Picked})
			return len(all) == 3
		})
		ctx, cancel := context.WithTimeout(ctxb, 100*time.Millisecond)
		defer cancel()
		if err := s.Stop(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Stop: %v, want the deadline", err)
		}
		if cause := receive(t, bl.causes, "cancellation"); !errors.Is(cause, scheduler.ErrLost) {
			t.Fatalf("cause %v, want ErrLost", cause)
		}
		all, err := c.List(ctxb, scheduler.Filter{State: scheduler.Due})
		if err != nil || len(all) != 3 {
			t.Fatalf("after Stop, due and unpicked: %v %+v, want 3", err, all)
		}
		for _, e := range all {
			if e.Picked || e.PickedBy != "" || !e.LastHeartbeat.IsZero() || e.Version != 3 {
				t.Fatalf("unpicked execution %+v: want picked_by NULL, heartbeat NULL, version 3 (insert, pick, unpick)", e)
			}
		}
	})
}

func TestDeleteUnresolvedAfterDeletesOnlyOldExecutionsOfUnknownTasks(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, b testdb.Backend) {
		cfg := newTable(t, b, recorder("known", newRuns()))
		cfg.HeartbeatInterval, cfg.DeleteUnresolvedAfter = 50*time.Millisecond, time.Hour
		c := newClient(t, b, scheduler.Config{Table: cfg.Table})
		c.Schedule(ctxb, scheduler.Instance{Task: "gone", ID: "old"}, time.Now().Add(-2*time.Hour))
		c.Schedule(ctxb, scheduler.Instance{Task: "gone", ID: "recent"}, time.Now().Add(-time.Minute))
		start(t, b, cfg)
		testdb.WaitFor(t, "the old execution's deletion", func() bool { return row(t, c, "gone", "old") == nil })
		if row(t, c, "gone", "recent") == nil {
			t.Fatal("the recent execution of the unknown task was deleted")
		}
	})
}

func TestARefusedCompletionDoesNotRefuseTheOthersWrittenWithIt(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, b testdb.Backend) {
		bl := newBlocker()
		cfg := newTable(t, b, bl.task("job"))
		cfg.Threads = 8
		s := start(t, b, cfg)
		for _, id := range []string{"a", "b", "c", "d", "e", "f"} {
			s.Schedule(ctxb, scheduler.Instance{Task: "job", ID: id}, time.Now())
		}
		for range 6 {
			receive(t, bl.started, "start")
		}
		// Another node takes "c" while it runs here.
		b.Exec(t, `UPDATE `+cfg.Table+` SET picked = true, picked_by = 'other', version = version + 1 WHERE task_instance = 'c'`)
		close(bl.release) // the six complete together, in as few batches as they meet in
		testdb.WaitFor(t, "the five others to be deleted", func() bool {
			all, _ := s.List(ctxb, scheduler.Filter{})
			return len(all) == 1
		})
		if e := row(t, s.Client, "job", "c"); e == nil || e.PickedBy != "other" {
			t.Fatalf("the taken execution: %+v", e)
		}
	})
}

func TestAReviveSkipsARowAnotherTransactionHoldsAndHeartbeatsGoOn(t *testing.T) {
	testdb.ForEachWhere(t, hasRowLocks, func(t *testing.T, b testdb.Backend) {
		bl := newBlocker()
		cfg := newTable(t, b, bl.task("job"))
		// Dead after 5 s: far below the dead row's hour, far above what a loaded
		// machine delays this scheduler's own heartbeats (at 100 ms it revived them).
		cfg.HeartbeatInterval, cfg.MissedHeartbeats = 50*time.Millisecond, 100
		c := newClient(t, b, cfg)
		c.Schedule(ctxb, scheduler.Instance{Task: "job", ID: "held"}, time.Now())
		// Dead by the database's clock, and held by a transaction of a node
		// that paused inside it.
		b.Exec(t, `UPDATE `+cfg.Table+` SET picked = true, picked_by = 'paused-node', version = 3, last_heartbeat = `+ago(b, time.Hour))
		tx, err := b.DB.BeginTx(ctxb, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		if _, err := tx.ExecContext(ctxb, b.Q(`SELECT task_instance FROM `+cfg.Table+` WHERE task_name = ? AND task_instance = ? FOR UPDATE`), "job", "held"); err != nil {
			t.Fatal(err)
		}
		s := start(t, b, cfg)
		if err := s.Schedule(ctxb, scheduler.Instance{Task: "job", ID: "running"}, time.Now()); err != nil {
			t.Fatal(err)
		}
		if e := receive(t, bl.started, "start of the other execution"); e.Instance != "running" {
			t.Fatalf("started %+v first, want the unlocked execution", e)
		}
		// A revive that waited for the lock would stop the liveness loop,
		// and with it the heartbeats of what this scheduler runs.
		beats := map[time.Time]bool{}
		testdb.WaitFor(t, "ten heartbeats of the running execution while the dead one is held", func() bool {
			beats[row(t, c, "job", "running").LastHeartbeat] = true
			return len(beats) >= 10
		})
		if h := row(t, c, "job", "held"); h.PickedBy != "paused-node" || h.Version != 3 {
			t.Fatalf("the held row was written through its lock: %+v", h)
		}
		tx.Rollback()
		if e := receive(t, bl.started, "run of the revived execution"); e.Instance != "held" || e.Version != 5 {
			t.Fatalf("after the lock: %+v, want the held execution revived (version 4) and picked (5)", e)
		}
		close(bl.release)
	})
}

// hasRowLocks reports whether b's writers lock rows, not the database.
func hasRowLocks(b testdb.Backend) bool { return b.Dialect != jdbc.SQLite }

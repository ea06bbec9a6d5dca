//go:build chaos

package chaos

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/uuid"

	"github.com/lockreg/lockreg/internal/testdb"
	"github.com/lockreg/lockreg/scheduler"
)

// A scheduler's liveness is judged by the database's clock alone. A
// scheduler whose process clock is decades behind (it runs in a
// testing/synctest bubble, whose clock starts in 2000, paced with the real
// one) keeps its long execution alive against an in-sync scheduler that
// looks for dead ones, and finds dead an execution whose heartbeat the
// database dates too old. db-scheduler, which writes and compares the
// hosts' clocks, would have its execution revived at once and would never
// find the dead one.
func TestASchedulerWithAProcessClockFarBehindNeitherLosesItsExecutionNorKeepsADeadOne(t *testing.T) {
	for _, b := range allBackends(t) {
		t.Run(b.Name, func(t *testing.T) {
			b.Require(t)
			table := "chaos_st_" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
			base := scheduler.Config{Table: table, HeartbeatInterval: 100 * time.Millisecond, MissedHeartbeats: 5,
				PollInterval: 50 * time.Millisecond}
			if err := scheduler.CreateSchema(context.Background(), b.DB, base); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.DB.Exec(`DROP TABLE ` + table) })
			c, err := scheduler.NewClient(b.DB, base)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			c.Schedule(ctx, scheduler.Instance{Task: "long", ID: "1"}, time.Now())
			c.Schedule(ctx, scheduler.Instance{Task: "orphan", ID: "1"}, time.Now())
			// The orphan's node died a minute ago by the database's clock.
			b.Exec(t, `UPDATE `+table+` SET picked = true, picked_by = 'dead-node', version = 2, last_heartbeat = `+
				dbAgo(b, time.Minute)+` WHERE task_name = 'orphan'`)

			// The in-sync scheduler runs "long" too, should it be revived.
			var inSyncRuns atomic.Int32
			inSyncCfg := base
			inSyncCfg.Tasks = []scheduler.Task{scheduler.OneTime("long", func(context.Context, *scheduler.Execution) error {
				inSyncRuns.Add(1)
				return nil
			})}
			inSync, err := scheduler.New(b.DB, inSyncCfg) // made outside the bubble, with its channels
			if err != nil {
				t.Fatal(err)
			}
			out, stopOut := newOutside()
			defer stopOut()
			var skewedYear int
			var longRuns, orphanRuns atomic.Int32
			realTime := time.NewTicker(time.Millisecond)
			defer realTime.Stop()
			synctest.Test(t, func(t *testing.T) {
				defer paceWithRealTime(realTime.C)()
				skewedYear = time.Now().Year()
				db, err := sql.Open(b.Driver, b.DSN)
				if err != nil {
					t.Fatal(err)
				}
				defer db.Close()
				cfg := base
				cfg.Tasks = []scheduler.Task{
					scheduler.OneTime("long", func(ctx context.Context, e *scheduler.Execution) error {
						longRuns.Add(1)
						time.Sleep(3 * time.Second) // 6 dead-execution timeouts, in heartbeats of the bubble's clock
						return nil
					}),
					scheduler.OneTime("orphan", func(context.Context, *scheduler.Execution) error {
						orphanRuns.Add(1)
						return nil
					}),
				}
				skewed, err := scheduler.New(db, cfg)
				if err != nil {
					t.Fatal(err)
				}
				if err := skewed.Start(ctx); err != nil {
					t.Fatal(err)
				}
				for longRuns.Load() == 0 { // picked by the skewed scheduler first
					time.Sleep(10 * time.Millisecond)
				}
				if err := out.do(func() error { return inSync.Start(context.Background()) }); err != nil {
					t.Fatal(err)
				}
				for {
					if _, err := skewed.Get(ctx, "long", "1"); err != nil { // deleted: completed
						break
					}
					time.Sleep(50 * time.Millisecond)
				}
				for orphanRuns.Load() == 0 {
					time.Sleep(10 * time.Millisecond)
				}
				if err := skewed.Stop(ctx); err != nil {
					t.Fatal(err)
				}
				out.do(func() error { return inSync.Stop(context.Background()) })
			})
			if n := inSyncRuns.Load(); n != 0 {
				t.Errorf("the in-sync scheduler revived and ran the skewed scheduler's live execution %d times", n)
			}
			if longRuns.Load() != 1 || orphanRuns.Load() != 1 {
				t.Errorf("long ran %d times, the orphan %d; want once each", longRuns.Load(), orphanRuns.Load())
			}
			t.Logf("%s: a scheduler on a process clock in %d kept its 3 s execution alive against one in %d "+
				"that revives after 500 ms, and revived the dead execution", b.Name, skewedYear, time.Now().Year())
		})
	}
}

// outside runs calls on a goroutine outside the bubble, so that what they
// start (a scheduler's goroutines, timers and pool) belongs to the real
// clock, until stop. Both channels are made outside: a goroutine outside a
// bubble must not use one made inside.
type outside struct {
	calls   chan func() error
	results chan error
}

func newOutside() (*outside, func()) {
	o := &outside{calls: make(chan func() error), results: make(chan error)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for f := range o.calls {
			o.results <- f()
		}
	}()
	return o, func() { close(o.calls); <-done }
}

func (o *outside) do(f func() error) error {
	o.calls <- f
	return <-o.results
}

// dbAgo is an SQL expression of the database's clock minus d, in the
// scheduler table's time representation.
func dbAgo(b testdb.Backend, d time.Duration) string {
	switch b.Dialect {
	case "postgres":
		return fmt.Sprintf(`now() - INTERVAL '%d milliseconds'`, d.Milliseconds())
	case "mysql":
		return fmt.Sprintf(`UTC_TIMESTAMP(6) - INTERVAL %d MICROSECOND`, d.Microseconds())
	}
	return fmt.Sprintf(`CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER) - %d`, d.Milliseconds())
}

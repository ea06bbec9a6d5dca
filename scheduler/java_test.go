package scheduler_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lockreg/lockreg/internal/testdb"
	"github.com/lockreg/lockreg/jdbc"
	"github.com/lockreg/lockreg/scheduler"
)

// javaScheduler replays Java db-scheduler's statements (JdbcTaskRepository,
// v16) statement for statement, with the parameters Java binds: the JVM's
// clock, as OffsetDateTime UTC on PostgreSQL, as a Timestamp in the JVM's
// zone on MySQL/MariaDB (UTC with alwaysPersistTimestampInUTC()), and on
// SQLite as sqlite-jdbc stores a Timestamp by default, epoch milliseconds.
type javaScheduler struct {
	b     testdb.Backend
	table string
	name  string         // schedulerName, picked_by
	loc   *time.Location // the JVM's zone on MySQL
	lock  bool           // LOCK_AND_FETCH (S5, PostgreSQL) rather than FETCH (S3 + S4 + S1)
}

func (j *javaScheduler) ts(t time.Time) any {
	t = t.Truncate(time.Microsecond)
	switch j.b.Dialect {
	case jdbc.Postgres:
		return t.UTC()
	case jdbc.MySQL:
		return t.In(j.loc).Format("2006-01-02 15:04:05.999999")
	}
	return t.UnixMilli()
}

func (j *javaScheduler) exec(ctx context.Context, q string, args ...any) (int64, error) {
	res, err := j.b.DB.ExecContext(ctx, j.b.Q(q), args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// schedule is SchedulerClient.scheduleIfNotExists: S1, then S2.
func (j *javaScheduler) schedule(ctx context.Context, task, inst, json string, at time.Time) error {
	var n int
	if err := j.b.DB.QueryRowContext(ctx, j.b.Q(`select count(*) from `+j.table+` where task_name = ? and task_instance = ?`), task, inst).Scan(&n); err != nil || n > 0 {
		return err
	}
	_, err := j.exec(ctx, `insert into `+j.table+`(task_name, task_instance, task_data, execution_time, picked, version) values(?, ?, ?, ?, ?, ?)`,
		task, inst, []byte(json), j.ts(at), false, int64(1))
	return err
}

type javaRow struct {
	task, inst string
	version    int64
}

// poll fetches due executions once and runs each with run, completing it
// as Java does: S8 (remove) guarded by the version it picked.
func (j *javaScheduler) poll(ctx context.Context, run func(javaRow)) (int, error) {
	var picked []javaRow
	now := time.Now()
	if j.lock {
		q := `WITH locked_executions as (UPDATE ` + j.table + ` st1 SET picked = ?, picked_by = ?, last_heartbeat = ?, version = version + 1 ` +
			`WHERE (st1.task_name, st1.task_instance) IN (SELECT st2.task_name, st2.task_instance FROM ` + j.table + ` st2 ` +
			`WHERE picked = ? and execution_time <= ? ORDER BY execution_time ASC FOR UPDATE SKIP LOCKED LIMIT 30) RETURNING st1.*) ` +
			`SELECT task_name, task_instance, version FROM locked_executions ORDER BY execution_time ASC`
		rows, err := j.b.DB.QueryContext(ctx, j.b.Q(q), true, j.name, j.ts(now), false, j.ts(now))
		if err != nil {
			return 0, err
		}
		for rows.Next() {
			var r javaRow
			if err := rows.Scan(&r.task, &r.inst, &r.version); err != nil {
				rows.Close()
				return 0, err
			}
			picked = append(picked, r)
		}
		rows.Close()
	} else {
		rows, err := j.b.DB.QueryContext(ctx, j.b.Q(`select task_name, task_instance, version from `+j.table+
			` where picked = ? and execution_time <= ? ORDER BY execution_time ASC LIMIT 30`), false, j.ts(now))
		if err != nil {
			return 0, err
		}
		var due []javaRow
		for rows.Next() {
			var r javaRow
			if err := rows.Scan(&r.task, &r.inst, &r.version); err != nil {
				rows.Close()
				return 0, err
			}
			due = append(due, r)
		}
		rows.Close()
		for _, r := range due { // S4, and S1 when it picked the row
			n, err := j.exec(ctx, `update `+j.table+` set picked = ?, picked_by = ?, last_heartbeat = ?, version = version + 1 `+
				`where picked = ? and task_name = ? and task_instance = ? and version = ?`,
				true, j.name, j.ts(time.Now()), false, r.task, r.inst, r.version)
			if err != nil {
				return 0, err
			}
			if n == 1 {
				if err := j.b.DB.QueryRowContext(ctx, j.b.Q(`select version from `+j.table+` where task_name = ? and task_instance = ?`),
					r.task, r.inst).Scan(&r.version); err != nil {
					return 0, err
				}
				picked = append(picked, r)
			}
		}
	}
	for _, r := range picked {
		run(r)
		n, err := j.exec(ctx, `delete from `+j.table+` where task_name = ? and task_instance = ? and version = ?`, r.task, r.inst, r.version)
		if err != nil {
			return 0, err
		}
		if n != 1 {
			return 0, fmt.Errorf("Java: remove of %s/%s version %d affected %d rows: \"Indicates a bug.\"", r.task, r.inst, r.version, n)
		}
	}
	return len(picked), nil
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
				j := &javaScheduler{b: b, table: cfg.Table, name: "java-node-1", loc: time.UTC, lock: lock}
				c := newClient(t, b, cfg)
				const n = 200
				for i := range n {
					var err error
					if i%2 == 0 {
						err = c.Schedule(ctxb, scheduler.Instance{Task: "shared", ID: fmt.Sprint(i), Data: i}, time.Now())
					} else {
						err = j.schedule(ctxb, "shared", fmt.Sprint(i), fmt.Sprint(i), time.Now())
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
						if _, err := j.poll(ctx, func(r javaRow) { note(r.inst) }); err != nil && ctx.Err() == nil {
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
		j := &javaScheduler{b: b, table: cfg.Table, name: "java", loc: loc}
		at := time.Now().Add(time.Hour).Truncate(time.Millisecond)
		if err := j.schedule(ctxb, "t", "later", `"x"`, at); err != nil {
			t.Fatal(err)
		}
		j.schedule(ctxb, "t", "now", `"y"`, time.Now().Add(-time.Second))
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
		j := &javaScheduler{b: b, table: cfg.Table, name: "java", loc: loc}
		var got []string
		if _, err := j.poll(ctxb, func(r javaRow) { got = append(got, r.inst) }); err != nil {
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
		cfg.HeartbeatInterval, cfg.MissedHeartbeats = 50*time.Millisecond, 2
		j := &javaScheduler{b: b, table: cfg.Table, name: "java-dead", loc: time.UTC}
		j.schedule(ctxb, "t", "1", `null`, time.Now().Add(-time.Hour))
		// S4 an hour ago: the Java node picked it and died.
		if _, err := j.exec(ctxb, `update `+j.table+` set picked = ?, picked_by = ?, last_heartbeat = ?, version = version + 1 `+
			`where picked = ? and task_name = ? and task_instance = ? and version = ?`,
			true, j.name, j.ts(time.Now().Add(-time.Hour)), false, "t", "1", int64(1)); err != nil {
			t.Fatal(err)
		}
		start(t, b, cfg)
		testdb.WaitFor(t, "the revived execution", func() bool { return r.count("1") == 1 })
	})
}

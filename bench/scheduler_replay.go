package main

// Replays of db-scheduler's polling strategies (FetchCandidates,
// LockAndFetchCandidates, JdbcTaskRepository), with its statements and
// its Java parameter binding (times of the client's clock, in UTC), on
// 4 instances of db-scheduler's default 10 threads. The SQL is that of
// scheduler/java_test.go (javaScheduler.poll).

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockreg/lockreg/internal/dbscheduler"
	"github.com/lockreg/lockreg/scheduler"
)

// db-scheduler's limits, as fractions of threads: FETCH's defaults (lower
// 0.5, upper 3.0) and pollUsingLockAndFetch's suggested ones (0.5, 1.0).
const (
	fetchUpper, fetchLower = 3 * schedThreads, schedThreads / 2
	lafUpper, lafLower     = 1 * schedThreads, schedThreads / 2
)

// replaySystem is a db-scheduler replay on b's server. Schedules are S2
// inserts, through lockreg's Client on db-scheduler's table without its
// NOTIFY.
type replaySystem struct {
	*schedBase
	e            *env
	client       *scheduler.Client
	lockAndFetch bool
	poll         time.Duration
	q            replaySQL
	cancel       context.CancelFunc
	wg           sync.WaitGroup
}

// replaySQL are the statements of the replay, in the server's
// placeholders.
type replaySQL struct {
	selectDue, pick, reread, remove string
	lockAndFetch                    func(limit int) string
}

func openReplaySystem(ctx context.Context, e *env, b *schedBase, lockAndFetch bool, poll time.Duration) (*replaySystem, error) {
	b.table = fetchSchedTable
	cfg := scheduler.Config{Table: b.table, Dialect: b.dialect(), NoNotify: true}
	if err := prepareSchedTable(ctx, b.s.admin, cfg); err != nil {
		return nil, err
	}
	cl, err := scheduler.NewClient(b.s.admin, cfg)
	if err != nil {
		return nil, err
	}
	return &replaySystem{schedBase: b, e: e, client: cl, lockAndFetch: lockAndFetch, poll: poll, q: replayStatements(b.server, b.table)}, nil
}

// replayStatements are S3, S4, S1, S8 and S5 on table.
func replayStatements(server, t string) replaySQL {
	bind := func(q string) string { return q }
	if server == "postgres" {
		bind = dbscheduler.Dollars
	}
	return replaySQL{
		selectDue: bind(`select * from ` + t + ` where picked = ? and execution_time <= ? ORDER BY execution_time ASC LIMIT ` + strconv.Itoa(fetchUpper)),
		pick: bind(`update ` + t + ` set picked = ?, picked_by = ?, last_heartbeat = ?, version = version + 1 ` +
			`where picked = ? and task_name = ? and task_instance = ? and version = ?`),
		reread: bind(`select * from ` + t + ` where task_name = ? and task_instance = ?`),
		remove: bind(`delete from ` + t + ` where task_name = ? and task_instance = ? and version = ?`),
		lockAndFetch: func(limit int) string {
			return bind(`WITH locked_executions as (UPDATE ` + t + ` st1 SET picked = ?, picked_by = ?, last_heartbeat = ?, version = version + 1 ` +
				`WHERE (st1.task_name, st1.task_instance) IN (SELECT st2.task_name, st2.task_instance FROM ` + t + ` st2 ` +
				`WHERE picked = ? and execution_time <= ? ORDER BY execution_time ASC FOR UPDATE SKIP LOCKED LIMIT ` + strconv.Itoa(limit) +
				`) RETURNING st1.*) SELECT * FROM locked_executions ORDER BY execution_time ASC`)
		},
	}
}

func (r *replaySystem) schedule(ctx context.Context, ids []int) error {
	return clientSchedule(ctx, r.client, ids)
}

func (r *replaySystem) left(ctx context.Context) (int64, error) {
	var n int64
	err := r.s.admin.QueryRowContext(ctx, `SELECT count(*) FROM `+r.table).Scan(&n)
	return n, err
}

func (r *replaySystem) start(ctx context.Context) error {
	rctx, cancel := context.WithCancel(ctx)
	r.cancel = cancel
	for i, db := range r.s.dbs {
		name := "bench-replay-" + strconv.Itoa(i)
		if r.lockAndFetch {
			r.lockAndFetchInstance(rctx, db, name)
		} else {
			r.fetchInstance(rctx, db, name)
		}
	}
	return nil
}

func (r *replaySystem) stop() {
	if r.cancel != nil {
		r.cancel()
	}
	r.wg.Wait()
}

func (r *replaySystem) logErr(format string, args ...any) {
	r.errs.Add(1)
	r.e.logf("dbscheduler replay: "+format, args...)
}

// fetchCand is a due row, of the fetch generation gen.
type fetchCand struct {
	task, inst string
	version    int64
	gen        int64
}

// fetchInstance is FETCH on one instance: select up to 3 × threads due
// rows (S3); per row on a thread the version-guarded pick (S4) and, when
// it picked the row, the re-read (S1); the no-op; the version-guarded
// DELETE (S8). A new fetch follows when a full batch is down to 0.5 ×
// threads left, and candidates of an older fetch are then stale; after a
// short batch it polls.
func (r *replaySystem) fetchInstance(ctx context.Context, db *sql.DB, name string) {
	queue := make(chan fetchCand, 4*fetchUpper)
	wake := make(chan struct{}, 1)
	var gen, left atomic.Int64
	r.wg.Go(func() { // the fetcher
		defer close(queue)
		for ctx.Err() == nil {
			due, err := fetchRows(ctx, db, r.q.selectDue, false, time.Now().UTC())
			if err != nil {
				if ctx.Err() == nil {
					r.logErr("select due: %v", err)
					sleep(ctx, 10*time.Millisecond)
				}
				continue
			}
			g := gen.Add(1)
			left.Store(int64(len(due)))
			for _, c := range due {
				c.gen = g
				select {
				case queue <- c:
				case <-ctx.Done():
					return
				}
			}
			wait := r.poll
			if len(due) == fetchUpper {
				wait = time.Second // woken at lower left; a safety net
			}
			waitWake(ctx, wake, wait)
		}
	})
	for range schedThreads {
		r.wg.Go(func() {
			for c := range queue {
				if c.gen < gen.Load() {
					continue // STALE
				}
				if err := r.fetchRun(ctx, db, c, name); err != nil && ctx.Err() == nil {
					r.logErr("%v", err)
				}
				if c.gen == gen.Load() && left.Add(-1) == fetchLower {
					poke(wake)
				}
			}
		})
	}
}

// lockAndFetchInstance is LOCK_AND_FETCH on one instance with
// PostgreSQL's single statement: S5 picks upper − (queued + running)
// rows; per row on a thread the no-op and S8. It fetches again at once
// while a full batch came back and at most lower are queued or running,
// else after the polling interval.
func (r *replaySystem) lockAndFetchInstance(ctx context.Context, db *sql.DB, name string) {
	queue := make(chan fetchCand, lafUpper)
	wake := make(chan struct{}, 1)
	var (
		inFlight atomic.Int64
		more     atomic.Bool
	)
	r.wg.Go(func() { // the fetcher
		defer close(queue)
		for ctx.Err() == nil {
			if n := lafUpper - int(inFlight.Load()); n > 0 {
				now := time.Now().UTC()
				got, err := fetchRows(ctx, db, r.q.lockAndFetch(n), true, name, now, false, now)
				if err != nil {
					if ctx.Err() == nil {
						r.logErr("lock and fetch: %v", err)
						sleep(ctx, 10*time.Millisecond)
					}
					continue
				}
				inFlight.Add(int64(len(got)))
				more.Store(len(got) == n)
				for _, c := range got {
					queue <- c // room for lafUpper: never blocks
				}
				if len(got) == n && inFlight.Load() <= lafLower {
					continue
				}
			}
			waitWake(ctx, wake, r.poll)
		}
	})
	for range schedThreads {
		r.wg.Go(func() {
			for c := range queue {
				r.t.ran(c.inst) // the no-op
				if err := r.remove(ctx, db, c); err != nil && ctx.Err() == nil {
					r.logErr("%v", err)
				}
				if inFlight.Add(-1) <= lafLower && more.Load() {
					poke(wake)
				}
			}
		})
	}
}

// waitWake waits for wake, d or ctx.
func waitWake(ctx context.Context, wake chan struct{}, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-wake:
	case <-t.C:
	case <-ctx.Done():
	}
}

// poke wakes a fetcher that is waiting, or will wait, on wake.
func poke(wake chan struct{}) {
	select {
	case wake <- struct{}{}:
	default:
	}
}

// fetchRows runs a select * (S3, S5) and reads its rows.
func fetchRows(ctx context.Context, db *sql.DB, q string, args ...any) ([]fetchCand, error) {
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var due []fetchCand
	for rows.Next() {
		c, err := scanCand(rows)
		if err != nil {
			return nil, err
		}
		due = append(due, c)
	}
	return due, rows.Err()
}

// scanCand reads task_name, task_instance and version of a select * row.
func scanCand(rows *sql.Rows) (fetchCand, error) {
	cols, err := rows.Columns()
	if err != nil {
		return fetchCand{}, err
	}
	vals := make([]any, len(cols))
	var c fetchCand
	for i, col := range cols {
		switch strings.ToLower(col) {
		case "task_name":
			vals[i] = &c.task
		case "task_instance":
			vals[i] = &c.inst
		case "version":
			vals[i] = &c.version
		default:
			vals[i] = new(any)
		}
	}
	return c, rows.Scan(vals...)
}

// fetchRun is PickDue and ExecutePicked of one candidate: S4, S1, the
// no-op, S8.
func (r *replaySystem) fetchRun(ctx context.Context, db *sql.DB, c fetchCand, name string) error {
	res, err := db.ExecContext(ctx, r.q.pick, true, name, time.Now().UTC(), false, c.task, c.inst, c.version)
	if err != nil {
		return fmt.Errorf("pick: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return err // ALREADY_PICKED
	}
	got, err := fetchRows(ctx, db, r.q.reread, c.task, c.inst)
	if err != nil {
		return fmt.Errorf("re-read: %w", err)
	}
	if len(got) != 1 {
		return errors.New("re-read: picked row missing")
	}
	c.version = got[0].version
	r.t.ran(c.inst) // the no-op
	return r.remove(ctx, db, c)
}

// remove is S8, which must delete exactly the row.
func (r *replaySystem) remove(ctx context.Context, db *sql.DB, c fetchCand) error {
	res, err := db.ExecContext(ctx, r.q.remove, c.task, c.inst, c.version)
	if err != nil {
		return fmt.Errorf("remove: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return fmt.Errorf("remove of %s version %d affected %d rows (%v): \"Indicates a bug.\"", c.inst, c.version, n, err)
	}
	return nil
}

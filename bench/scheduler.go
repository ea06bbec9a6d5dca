package main

// The scheduler scenario: the drain of a pre-inserted due backlog of no-op
// executions by 4 instances (each its own pool), for lockreg's scheduler,
// River and a replay of db-scheduler's default fetch strategy, on the same
// PostgreSQL database in one run.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverdatabasesql"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/lockreg/lockreg/jdbc/pgxlisten"
	"github.com/lockreg/lockreg/scheduler"
)

const (
	schedulerScenario = "scheduler"
	schedInstances    = 4
	schedThreads      = 10 // per instance: lockreg's Threads, River's MaxWorkers, db-scheduler's threads
	schedPool         = schedThreads + 2
	schedPoll         = 100 * time.Millisecond
	schedTask         = "bench-noop"
	lockregSchedTable = "bench_sched_lockreg"
	fetchSchedTable   = "bench_sched_dbscheduler"
	riverSchema       = "bench_river"
)

var schedulerContestants = []string{"lockreg-scheduler", "river", "dbscheduler-fetch"}

// schedulerRound drains the backlog once with every contestant, in turn.
func schedulerRound(ctx context.Context, e *env, cfg config, keep func(result)) {
	for _, name := range schedulerContestants {
		res := result{Scenario: schedulerScenario, Contestant: name, Backlog: ip(int64(cfg.schedBacklog))}
		if e.pgErr != nil {
			res.Skipped = e.pgErr.Error()
			keep(res)
			continue
		}
		var (
			d   drain
			err error
		)
		switch name {
		case "lockreg-scheduler":
			d, err = drainLockreg(ctx, e, cfg.schedBacklog)
		case "river":
			d, err = drainRiver(ctx, e, cfg.schedBacklog)
		case "dbscheduler-fetch":
			d, err = drainFetch(ctx, e, cfg.schedBacklog)
		}
		if err != nil {
			res.Skipped = "failed: " + err.Error()
			keep(res)
			continue
		}
		res.Executions = ip(d.executions)
		res.Errors = ip(d.errors)
		res.OpsPerSec = fp(float64(d.executions) / d.elapsed.Seconds())
		if d.stmts >= 0 && d.executions > 0 {
			res.StmtsPerOp = fp(float64(d.stmts) / float64(d.executions))
		}
		keep(res)
	}
}

// drain is one contestant's drain: handler calls, time from start until
// the backlog was worked and written, client statements in that time,
// errors logged.
type drain struct {
	executions, stmts, errors int64
	elapsed                   time.Duration
}

// schedDBs opens the instances' pools, counted, and one uncounted pool
// for set-up and for watching the table.
type schedDBs struct {
	dbs   []*sql.DB
	cs    []*counter
	admin *sql.DB
}

func openSchedDBs(e *env) (*schedDBs, error) {
	s := &schedDBs{}
	admin, _, err := openPgx(e.pgDSN, 2)
	if err != nil {
		return nil, err
	}
	s.admin = admin
	for range schedInstances {
		db, c, err := openPgx(e.pgDSN, schedPool)
		if err != nil {
			s.close()
			return nil, err
		}
		s.dbs, s.cs = append(s.dbs, db), append(s.cs, c)
	}
	return s, nil
}

func (s *schedDBs) stmts() int64 {
	var n int64
	for _, c := range s.cs {
		n += count(c)
	}
	return n
}

func (s *schedDBs) close() {
	for _, db := range s.dbs {
		db.Close()
	}
	if s.admin != nil {
		s.admin.Close()
	}
}

// schedTimeout bounds a drain: generous, a safety net only.
func schedTimeout(backlog int) time.Duration {
	return 2*time.Minute + time.Duration(backlog)*5*time.Millisecond
}

// waitDrained waits until done reaches backlog and then until left, a
// count of the rows still to be worked, is 0.
func waitDrained(ctx context.Context, admin *sql.DB, done *atomic.Int64, backlog int, left string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for done.Load() < int64(backlog) {
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d executions ran within %v", done.Load(), backlog, timeout)
		}
		time.Sleep(2 * time.Millisecond)
	}
	for {
		var n int64
		if err := admin.QueryRowContext(ctx, left).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d rows left after %v", n, timeout)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// errCounter is a slog handler that counts error records and passes
// records of level warning and above on to stderr.
type errCounter struct {
	slog.Handler
	n *atomic.Int64
}

func newErrLogger(n *atomic.Int64) *slog.Logger {
	return slog.New(errCounter{slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}), n})
}

func (h errCounter) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelError {
		h.n.Add(1)
	}
	return h.Handler.Handle(ctx, r)
}

func (h errCounter) WithAttrs(as []slog.Attr) slog.Handler {
	return errCounter{h.Handler.WithAttrs(as), h.n}
}

func (h errCounter) WithGroup(g string) slog.Handler { return errCounter{h.Handler.WithGroup(g), h.n} }

// prepareSchedTable makes table empty, db-scheduler's layout, and fills it
// with backlog due executions of schedTask through Client.ScheduleBatch.
func prepareSchedTable(ctx context.Context, db *sql.DB, table string, backlog int) error {
	if _, err := db.ExecContext(ctx, `DROP TABLE IF EXISTS `+table); err != nil {
		return err
	}
	cfg := scheduler.Config{Table: table}
	if err := scheduler.CreateSchema(ctx, db, cfg); err != nil {
		return err
	}
	cl, err := scheduler.NewClient(db, cfg)
	if err != nil {
		return err
	}
	at := time.Now().Add(-time.Second)
	for i := 0; i < backlog; i += 10000 {
		insts := make([]scheduler.Instance, 0, 10000)
		for j := i; j < min(backlog, i+10000); j++ {
			insts = append(insts, scheduler.Instance{Task: schedTask, ID: strconv.Itoa(j)})
		}
		if _, err := cl.ScheduleBatch(ctx, insts, at); err != nil {
			return err
		}
	}
	_, err = db.ExecContext(ctx, `ANALYZE `+table)
	return err
}

func drainLockreg(ctx context.Context, e *env, backlog int) (drain, error) {
	var d drain
	s, err := openSchedDBs(e)
	if err != nil {
		return d, err
	}
	defer s.close()
	if err := prepareSchedTable(ctx, s.admin, lockregSchedTable, backlog); err != nil {
		return d, fmt.Errorf("preparing %s: %w", lockregSchedTable, err)
	}
	var done, errs atomic.Int64
	task := scheduler.OneTime(schedTask, func(context.Context, *scheduler.Execution) error {
		done.Add(1)
		return nil
	})
	var scheds []*scheduler.Scheduler
	for i, db := range s.dbs {
		sc, err := scheduler.New(db, scheduler.Config{Table: lockregSchedTable, Tasks: []scheduler.Task{task},
			Name: "bench-" + strconv.Itoa(i), Threads: schedThreads, PollInterval: schedPoll,
			Listener: pgxlisten.New(db), Logger: newErrLogger(&errs)})
		if err != nil {
			return d, err
		}
		scheds = append(scheds, sc)
	}
	s0, start := s.stmts(), time.Now()
	for _, sc := range scheds {
		if err := sc.Start(ctx); err != nil {
			return d, err
		}
	}
	defer func() {
		for _, sc := range scheds {
			sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			sc.Stop(sctx)
			cancel()
		}
	}()
	err = waitDrained(ctx, s.admin, &done, backlog, `SELECT count(*) FROM `+lockregSchedTable, schedTimeout(backlog))
	d.elapsed, d.stmts = time.Since(start), s.stmts()-s0
	d.executions, d.errors = done.Load(), errs.Load()
	return d, err
}

// riverArgs is the no-op job of the river contestant.
type riverArgs struct{}

func (riverArgs) Kind() string { return schedTask }

type riverWorker struct {
	river.WorkerDefaults[riverArgs]
	done *atomic.Int64
}

func (w *riverWorker) Work(context.Context, *river.Job[riverArgs]) error {
	w.done.Add(1)
	return nil
}

// drainRiver: River's own benchmark settings (riverbench: FetchCooldown
// 2 ms, FetchPollInterval 20 ms, InsertMany in batches of 5 000), with
// MaxWorkers = schedThreads per client so that 4 × 10 executions run at
// once, as for the others. riverdatabasesql has no listener: poll only.
func drainRiver(ctx context.Context, e *env, backlog int) (drain, error) {
	var d drain
	s, err := openSchedDBs(e)
	if err != nil {
		return d, err
	}
	defer s.close()
	var done, errs atomic.Int64
	logger := newErrLogger(&errs)
	for _, q := range []string{`DROP SCHEMA IF EXISTS ` + riverSchema + ` CASCADE`, `CREATE SCHEMA ` + riverSchema} {
		if _, err := s.admin.ExecContext(ctx, q); err != nil {
			return d, err
		}
	}
	mig, err := rivermigrate.New(riverdatabasesql.New(s.admin), &rivermigrate.Config{Schema: riverSchema, Logger: logger})
	if err != nil {
		return d, err
	}
	if _, err := mig.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return d, fmt.Errorf("river migrate: %w", err)
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, &riverWorker{done: &done})
	ins, err := river.NewClient(riverdatabasesql.New(s.admin), &river.Config{Schema: riverSchema, Workers: workers, Logger: logger})
	if err != nil {
		return d, err
	}
	for i := 0; i < backlog; i += 5000 {
		params := make([]river.InsertManyParams, 0, 5000)
		for range min(backlog, i+5000) - i {
			params = append(params, river.InsertManyParams{Args: riverArgs{}})
		}
		if _, err := ins.InsertManyFast(ctx, params); err != nil {
			return d, fmt.Errorf("river insert: %w", err)
		}
	}
	if _, err := s.admin.ExecContext(ctx, `ANALYZE `+riverSchema+`.river_job`); err != nil {
		return d, err
	}
	var clients []*river.Client[*sql.Tx]
	for _, db := range s.dbs {
		c, err := river.NewClient(riverdatabasesql.New(db), &river.Config{
			Schema:            riverSchema,
			Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: schedThreads}},
			Workers:           workers,
			FetchCooldown:     2 * time.Millisecond,
			FetchPollInterval: 20 * time.Millisecond,
			Logger:            logger,
		})
		if err != nil {
			return d, err
		}
		clients = append(clients, c)
	}
	s0, start := s.stmts(), time.Now()
	for _, c := range clients {
		if err := c.Start(ctx); err != nil {
			return d, err
		}
	}
	defer func() {
		for _, c := range clients {
			sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			c.Stop(sctx)
			cancel()
		}
	}()
	err = waitDrained(ctx, s.admin, &done, backlog,
		`SELECT count(*) FROM `+riverSchema+`.river_job WHERE state <> 'completed'`, schedTimeout(backlog))
	d.elapsed, d.stmts = time.Since(start), s.stmts()-s0
	d.executions, d.errors = done.Load(), errs.Load()
	return d, err
}

// fetchCand is a due row of db-scheduler's fetch, of the fetch generation
// gen.
type fetchCand struct {
	task, inst string
	version    int64
	gen        int64
}

// drainFetch replays db-scheduler's default FETCH strategy
// (FetchCandidates, JdbcTaskRepository) on 4 instances of 10 threads:
// select up to 3 × threads due rows (S3); per row on a thread the
// version-guarded pick (S4) and, when it picked the row, the re-read (S1);
// the no-op; the version-guarded DELETE (S8). A new fetch follows when a
// full batch is down to 0.5 × threads left, and candidates of an older
// fetch are then stale; after a short batch it polls.
func drainFetch(ctx context.Context, e *env, backlog int) (drain, error) {
	var d drain
	s, err := openSchedDBs(e)
	if err != nil {
		return d, err
	}
	defer s.close()
	if err := prepareSchedTable(ctx, s.admin, fetchSchedTable, backlog); err != nil {
		return d, fmt.Errorf("preparing %s: %w", fetchSchedTable, err)
	}
	const upper, lower = 3 * schedThreads, schedThreads / 2
	t := fetchSchedTable
	var (
		selectDue = `select * from ` + t + ` where picked = $1 and execution_time <= $2 ORDER BY execution_time ASC LIMIT ` + strconv.Itoa(upper)
		pick      = `update ` + t + ` set picked = $1, picked_by = $2, last_heartbeat = $3, version = version + 1 ` +
			`where picked = $4 and task_name = $5 and task_instance = $6 and version = $7`
		reread = `select * from ` + t + ` where task_name = $1 and task_instance = $2`
		remove = `delete from ` + t + ` where task_name = $1 and task_instance = $2 and version = $3`
	)
	var done, errs atomic.Int64
	logErr := func(format string, args ...any) {
		errs.Add(1)
		e.logf("dbscheduler-fetch: "+format, args...)
	}
	rctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	s0, start := s.stmts(), time.Now()
	for i, db := range s.dbs {
		name := "bench-fetch-" + strconv.Itoa(i)
		queue := make(chan fetchCand, 4*upper)
		wake := make(chan struct{}, 1)
		var gen, left atomic.Int64
		wg.Go(func() { // the fetcher
			defer close(queue)
			for rctx.Err() == nil {
				due, err := fetchDue(rctx, db, selectDue)
				if err != nil {
					if rctx.Err() == nil {
						logErr("select due: %v", err)
						sleep(rctx, 10*time.Millisecond)
					}
					continue
				}
				g := gen.Add(1)
				left.Store(int64(len(due)))
				for _, c := range due {
					c.gen = g
					select {
					case queue <- c:
					case <-rctx.Done():
						return
					}
				}
				wait := schedPoll
				if len(due) == upper {
					wait = time.Second // woken at lower left; a safety net
				}
				select {
				case <-wake:
				case <-time.After(wait):
				case <-rctx.Done():
					return
				}
			}
		})
		for range schedThreads {
			wg.Go(func() {
				for c := range queue {
					if c.gen < gen.Load() {
						continue // STALE
					}
					if err := fetchRun(rctx, db, c, name, pick, reread, remove, &done); err != nil && rctx.Err() == nil {
						logErr("%v", err)
					}
					if c.gen == gen.Load() && left.Add(-1) == lower {
						select {
						case wake <- struct{}{}:
						default:
						}
					}
				}
			})
		}
	}
	err = waitDrained(ctx, s.admin, &done, backlog, `SELECT count(*) FROM `+t, schedTimeout(backlog))
	d.elapsed, d.stmts = time.Since(start), s.stmts()-s0
	cancel()
	wg.Wait()
	d.executions, d.errors = done.Load(), errs.Load()
	return d, err
}

// fetchDue is S3: select * of the due, unpicked rows.
func fetchDue(ctx context.Context, db *sql.DB, q string) ([]fetchCand, error) {
	rows, err := db.QueryContext(ctx, q, false, time.Now().UTC())
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
func fetchRun(ctx context.Context, db *sql.DB, c fetchCand, name, pick, reread, remove string, done *atomic.Int64) error {
	res, err := db.ExecContext(ctx, pick, true, name, time.Now().UTC(), false, c.task, c.inst, c.version)
	if err != nil {
		return fmt.Errorf("pick: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return err // ALREADY_PICKED
	}
	rows, err := db.QueryContext(ctx, reread, c.task, c.inst)
	if err != nil {
		return fmt.Errorf("re-read: %w", err)
	}
	found := false
	if rows.Next() {
		var r fetchCand
		if r, err = scanCand(rows); err == nil {
			c.version, found = r.version, true
		}
	}
	rows.Close()
	if err != nil {
		return fmt.Errorf("re-read: %w", err)
	}
	if !found {
		return errors.New("re-read: picked row missing")
	}
	done.Add(1) // the no-op
	res, err = db.ExecContext(ctx, remove, c.task, c.inst, c.version)
	if err != nil {
		return fmt.Errorf("remove: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return fmt.Errorf("remove of %s version %d affected %d rows (%v): \"Indicates a bug.\"", c.inst, c.version, n, err)
	}
	return nil
}

// schedulerBrief is the progress line of a scheduler result.
func schedulerBrief(r result) string {
	return f(r.OpsPerSec, 0) + " executions/s, " + i64(r.Executions) + " of " + i64(r.Backlog) +
		", stmts/exec " + f(r.StmtsPerOp, 2) + ", errors " + i64(r.Errors)
}

// schedulerSection writes the scheduler table, with each contestant's
// rate relative to river's and dbscheduler-fetch's.
func schedulerSection(section func(s, title, header string, row func(r result) string), cfg config, rs []result) {
	rate := map[string]float64{}
	for _, r := range rs {
		if r.Scenario == schedulerScenario && r.Skipped == "" && r.OpsPerSec != nil {
			rate[r.Contestant] = *r.OpsPerSec
		}
	}
	ratio := func(r result, to string) string {
		if rate[to] == 0 || r.OpsPerSec == nil {
			return "–"
		}
		return fmt.Sprintf("%.2f×", *r.OpsPerSec/rate[to])
	}
	section(schedulerScenario, fmt.Sprintf("scheduler: drain of %d due no-op executions, %d instances × %d threads (own pools of %d)",
		cfg.schedBacklog, schedInstances, schedThreads, schedPool),
		"| contestant | executions / backlog | executions/s | stmts/exec (client) | vs river | vs dbscheduler-fetch | errors |",
		func(r result) string {
			return strings.Join([]string{i64(r.Executions) + " / " + i64(r.Backlog), f(r.OpsPerSec, 0), f(r.StmtsPerOp, 2),
				ratio(r, "river"), ratio(r, "dbscheduler-fetch"), i64(r.Errors)}, " | ")
		})
}

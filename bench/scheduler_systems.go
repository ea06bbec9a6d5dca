package main

// The lockreg and River scheduler contestants.

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverdatabasesql"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/lockreg/lockreg/jdbc/pgxlisten"
	"github.com/lockreg/lockreg/scheduler"
)

// prepareSchedTable makes table empty, in db-scheduler's layout.
func prepareSchedTable(ctx context.Context, db *sql.DB, cfg scheduler.Config) error {
	if _, err := db.ExecContext(ctx, `DROP TABLE IF EXISTS `+cfg.Table); err != nil {
		return fmt.Errorf("dropping %s: %w", cfg.Table, err)
	}
	if err := scheduler.CreateSchema(ctx, db, cfg); err != nil {
		return fmt.Errorf("creating %s: %w", cfg.Table, err)
	}
	return nil
}

// schedInstancesOf returns scheduler.Instances of schedTask for ids.
func schedInstancesOf(ids []int) []scheduler.Instance {
	insts := make([]scheduler.Instance, len(ids))
	for i, id := range ids {
		insts[i] = scheduler.Instance{Task: schedTask, ID: strconv.Itoa(id)}
	}
	return insts
}

// clientSchedule schedules ids due now through cl: Schedule for one,
// ScheduleBatch (one transaction) for more.
func clientSchedule(ctx context.Context, cl *scheduler.Client, ids []int) error {
	now := time.Now()
	if len(ids) == 1 {
		return cl.Schedule(ctx, scheduler.Instance{Task: schedTask, ID: strconv.Itoa(ids[0])}, now)
	}
	n, err := cl.ScheduleBatch(ctx, schedInstancesOf(ids), now)
	if err == nil && n != len(ids) {
		err = fmt.Errorf("ScheduleBatch inserted %d of %d", n, len(ids))
	}
	return err
}

// lockregSystem is lockreg's scheduler: scheduler.New with Threads 10 on
// each instance's pool; schedules go through a Client on the uncounted
// pool (on PostgreSQL it notifies at commit).
type lockregSystem struct {
	*schedBase
	client *scheduler.Client
	scheds []*scheduler.Scheduler
}

func openLockregSystem(ctx context.Context, b *schedBase, c schedContestant, poll time.Duration) (*lockregSystem, error) {
	b.table = lockregSchedTable
	task := scheduler.OneTime(schedTask, func(_ context.Context, x *scheduler.Execution) error {
		b.t.ran(x.Instance)
		return nil
	})
	base := scheduler.Config{Table: b.table, Dialect: b.dialect(), Tasks: []scheduler.Task{task}, PollInterval: poll}
	if err := prepareSchedTable(ctx, b.s.admin, base); err != nil {
		return nil, err
	}
	cl, err := scheduler.NewClient(b.s.admin, base)
	if err != nil {
		return nil, err
	}
	l := &lockregSystem{schedBase: b, client: cl}
	for i, db := range b.s.dbs {
		cfg := base
		cfg.Name, cfg.Threads, cfg.Logger = "bench-"+strconv.Itoa(i), schedThreads, newErrLogger(&b.errs)
		if c.listen {
			cfg.Listener = pgxlisten.New(db)
		}
		sc, err := scheduler.New(db, cfg)
		if err != nil {
			return nil, err
		}
		l.scheds = append(l.scheds, sc)
	}
	return l, nil
}

func (l *lockregSystem) schedule(ctx context.Context, ids []int) error {
	return clientSchedule(ctx, l.client, ids)
}

func (l *lockregSystem) start(ctx context.Context) error {
	for i, sc := range l.scheds {
		if err := sc.Start(ctx); err != nil {
			(&lockregSystem{scheds: l.scheds[:i]}).stop()
			return err
		}
	}
	return nil
}

func (l *lockregSystem) stop() {
	for _, sc := range l.scheds {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		sc.Stop(sctx)
		cancel()
	}
}

func (l *lockregSystem) left(ctx context.Context) (int64, error) {
	var n int64
	err := l.s.admin.QueryRowContext(ctx, `SELECT count(*) FROM `+l.table).Scan(&n)
	return n, err
}

// riverArgs is the no-op job of the river contestant; ID is the tally's.
type riverArgs struct {
	ID int `json:"id"`
}

func (riverArgs) Kind() string { return schedTask }

type riverWorker struct {
	river.WorkerDefaults[riverArgs]
	t *tally
}

func (w *riverWorker) Work(_ context.Context, j *river.Job[riverArgs]) error {
	w.t.ran(strconv.Itoa(j.Args.ID))
	return nil
}

// riverSystem is River v0.51.2 on riverdatabasesql over each instance's
// pgx stdlib pool, with a pgxpool of 2 connections per instance for its
// listener (NewWithPgxListener), MaxWorkers 10 per client. Throughput
// modes use riverbench's FetchCooldown 2 ms and FetchPollInterval 20 ms;
// latency River's defaults. Inserts are InsertManyFast, or Insert for one,
// through an insert-only client on the uncounted pool.
type riverSystem struct {
	*schedBase
	ins     *river.Client[*sql.Tx]
	clients []*river.Client[*sql.Tx]
	pools   []*pgxpool.Pool
}

func openRiverSystem(ctx context.Context, e *env, b *schedBase, defaults bool) (*riverSystem, error) {
	b.table = riverSchema + ".river_job"
	r := &riverSystem{schedBase: b}
	logger := newErrLogger(&b.errs)
	for _, q := range []string{`DROP SCHEMA IF EXISTS ` + riverSchema + ` CASCADE`, `CREATE SCHEMA ` + riverSchema} {
		if _, err := b.s.admin.ExecContext(ctx, q); err != nil {
			return nil, err
		}
	}
	mig, err := rivermigrate.New(riverdatabasesql.New(b.s.admin), &rivermigrate.Config{Schema: riverSchema, Logger: logger})
	if err != nil {
		return nil, err
	}
	if _, err := mig.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return nil, fmt.Errorf("river migrate: %w", err)
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, &riverWorker{t: b.t})
	if r.ins, err = river.NewClient(riverdatabasesql.New(b.s.admin), &river.Config{Schema: riverSchema, Workers: workers, Logger: logger}); err != nil {
		return nil, err
	}
	for _, db := range b.s.dbs {
		pc, err := pgxpool.ParseConfig(e.pgDSN)
		if err != nil {
			r.close()
			return nil, err
		}
		pc.MaxConns = 2
		pool, err := pgxpool.NewWithConfig(ctx, pc)
		if err != nil {
			r.close()
			return nil, err
		}
		r.pools = append(r.pools, pool)
		rc := &river.Config{Schema: riverSchema, Workers: workers, Logger: logger,
			Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: schedThreads}}}
		if !defaults {
			rc.FetchCooldown, rc.FetchPollInterval = 2*time.Millisecond, 20*time.Millisecond
		}
		c, err := river.NewClient(riverdatabasesql.NewWithPgxListener(db, pool), rc)
		if err != nil {
			r.close()
			return nil, err
		}
		r.clients = append(r.clients, c)
	}
	return r, nil
}

func (r *riverSystem) schedule(ctx context.Context, ids []int) error {
	if len(ids) == 1 {
		_, err := r.ins.Insert(ctx, riverArgs{ID: ids[0]}, nil)
		return err
	}
	params := make([]river.InsertManyParams, len(ids))
	for i, id := range ids {
		params[i] = river.InsertManyParams{Args: riverArgs{ID: id}}
	}
	_, err := r.ins.InsertManyFast(ctx, params)
	return err
}

func (r *riverSystem) start(ctx context.Context) error {
	for i, c := range r.clients {
		if err := c.Start(ctx); err != nil {
			(&riverSystem{clients: r.clients[:i]}).stop()
			return err
		}
	}
	return nil
}

func (r *riverSystem) stop() {
	for _, c := range r.clients {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		c.Stop(sctx)
		cancel()
	}
}

func (r *riverSystem) left(ctx context.Context) (int64, error) {
	var n int64
	err := r.s.admin.QueryRowContext(ctx, `SELECT count(*) FROM `+r.table+` WHERE state <> 'completed'`).Scan(&n)
	return n, err
}

func (r *riverSystem) close() {
	for _, p := range r.pools {
		p.Close()
	}
	r.schedBase.close()
}

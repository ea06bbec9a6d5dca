package main

// The scheduler scenarios, three measurements of each scheduler contestant
// with 4 instances (each its own pool) of no-op executions:
//
//   - scheduler (drain, db-scheduler's method): a pre-inserted due backlog
//     drained (scheduler_modes.go runDrain);
//   - scheduler-continuous (River's method): producers keep executions due
//     now queued while the instances run them; the rate in steady state
//     (runContinuous);
//   - scheduler-latency: one execution due now scheduled every 20 ms; the
//     time from the commit of its schedule to the start of its handler
//     (runLatency).
//
// The contestants are lockreg's scheduler, River and replays of
// db-scheduler's fetch and lock-and-fetch strategies on PostgreSQL, and
// lockreg's scheduler (and the fetch replay) on MariaDB and SQLite.

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockreg/lockreg/jdbc"
)

const (
	schedulerScenario = "scheduler" // the drain
	schedContScenario = "scheduler-continuous"
	schedLatScenario  = "scheduler-latency"
	schedInstances    = 4
	schedThreads      = 10 // per instance: lockreg's Threads, River's MaxWorkers, db-scheduler's threads
	schedPool         = schedThreads + 2
	schedPoll         = 100 * time.Millisecond // drain and continuous: the polling contestants' interval
	schedRate         = 50                     // latency: executions scheduled per second
	schedQueued       = 10000                  // continuous: executions kept scheduled and not yet run, at most
	schedTask         = "bench-noop"
	lockregSchedTable = "bench_sched_lockreg"
	fetchSchedTable   = "bench_sched_dbscheduler"
	riverSchema       = "bench_river"
)

// The modes of a scheduler contestant, in the order a round runs them.
const (
	modeDrain      = "drain"
	modeContinuous = "continuous"
	modeLatency    = "latency"
)

var (
	allModes   = []string{modeDrain, modeContinuous, modeLatency}
	throughput = []string{modeDrain, modeContinuous}
)

// schedContestant is one scheduler contestant: what runs, on which
// server, in which modes.
type schedContestant struct {
	name   string
	kind   string // "lockreg", "river", "fetch" or "lock-and-fetch"
	server string // "postgres", "mariadb" or "sqlite"
	listen bool   // lockreg: Config.Listener (pgxlisten); river: NewWithPgxListener
	modes  []string
}

var schedContestants = []schedContestant{
	{name: "lockreg-scheduler", kind: "lockreg", server: "postgres", listen: true, modes: allModes},
	{name: "lockreg-scheduler-poll", kind: "lockreg", server: "postgres", modes: []string{modeLatency}},
	{name: "river", kind: "river", server: "postgres", listen: true, modes: allModes},
	{name: "dbscheduler-fetch", kind: "fetch", server: "postgres", modes: allModes},
	{name: "dbscheduler-lock-and-fetch", kind: "lock-and-fetch", server: "postgres", modes: allModes},
	{name: "lockreg-scheduler-mariadb", kind: "lockreg", server: "mariadb", modes: throughput},
	{name: "dbscheduler-fetch-mariadb", kind: "fetch", server: "mariadb", modes: throughput},
	{name: "lockreg-scheduler-sqlite", kind: "lockreg", server: "sqlite", modes: throughput},
}

// schedNames are the scheduler contestants' names.
func schedNames() []string {
	var n []string
	for _, c := range schedContestants {
		n = append(n, c.name)
	}
	return n
}

// scenarioOf is the scenario name of the results of mode.
func scenarioOf(mode string) string {
	switch mode {
	case modeContinuous:
		return schedContScenario
	case modeLatency:
		return schedLatScenario
	}
	return schedulerScenario
}

// poll is c's polling interval in mode: db-scheduler's default 10 s where
// the listener wakes lockreg's scheduler, -scheduler-poll for the polling
// contestants' latency, schedPoll otherwise. River's comes from its own
// configuration (riverSystem).
func (c schedContestant) poll(mode string, cfg config) time.Duration {
	switch {
	case mode == modeLatency && c.listen:
		return 10 * time.Second
	case mode == modeLatency:
		return cfg.schedPoll
	}
	return schedPoll
}

// wake describes how c's instances learn of new executions in mode.
func (c schedContestant) wake(mode string, cfg config) string {
	switch {
	case c.kind == "river" && mode == modeLatency:
		return "LISTEN/NOTIFY (NewWithPgxListener), River's defaults: FetchCooldown 100 ms, FetchPollInterval 1 s"
	case c.kind == "river":
		return "LISTEN/NOTIFY (NewWithPgxListener), FetchCooldown 2 ms, FetchPollInterval 20 ms (riverbench)"
	case c.listen:
		return "LISTEN/NOTIFY (pgxlisten), poll " + c.poll(mode, cfg).String()
	}
	return "poll " + c.poll(mode, cfg).String()
}

// schedulerRound runs every mode of every scheduler contestant once, mode
// by mode, and passes each result to keep.
func schedulerRound(ctx context.Context, e *env, cfg config, keep func(result)) {
	for _, mode := range cfg.schedModes {
		for _, c := range schedContestants {
			if slices.Contains(c.modes, mode) && slices.Contains(cfg.schedOnly, c.name) {
				keep(schedulerRun(ctx, e, cfg, c, mode))
			}
		}
	}
}

// schedulerRun deploys c, measures it in mode and tears it down.
func schedulerRun(ctx context.Context, e *env, cfg config, c schedContestant, mode string) result {
	res := result{Scenario: scenarioOf(mode), Contestant: c.name, Wake: c.wake(mode, cfg)}
	if err := e.schedUnavailable(c.server); err != nil {
		res.Skipped = err.Error()
		return res
	}
	t := &tally{timed: mode == modeLatency}
	sys, err := openSystem(ctx, e, cfg, c, mode, t)
	if err != nil {
		res.Skipped = "failed: " + err.Error()
		return res
	}
	defer sys.close()
	var m measured
	switch mode {
	case modeDrain:
		m, err = runDrain(ctx, sys, t, cfg.schedBacklog)
	case modeContinuous:
		m, err = runContinuous(ctx, sys, t, cfg)
	default:
		m, err = runLatency(ctx, sys, t, cfg)
	}
	if err != nil {
		res.Skipped = "failed: " + err.Error()
		return res
	}
	m.fill(&res, t, sys.base().errs.Load())
	return res
}

// openSystem opens c's pools and prepares its empty table (or schema).
func openSystem(ctx context.Context, e *env, cfg config, c schedContestant, mode string, t *tally) (schedSystem, error) {
	s, err := openSchedDBs(e, c.server)
	if err != nil {
		return nil, err
	}
	b := &schedBase{s: s, t: t, server: c.server}
	var sys schedSystem
	switch c.kind {
	case "lockreg":
		sys, err = openLockregSystem(ctx, b, c, c.poll(mode, cfg))
	case "river":
		sys, err = openRiverSystem(ctx, e, b, mode == modeLatency)
	default:
		sys, err = openReplaySystem(ctx, e, b, c.kind == "lock-and-fetch", c.poll(mode, cfg))
	}
	if err != nil {
		s.close()
		return nil, err
	}
	return sys, nil
}

// schedUnavailable says why server cannot be used, or nil.
func (e *env) schedUnavailable(server string) error {
	switch server {
	case "postgres":
		return e.pgErr
	case "mariadb":
		return e.myErr
	}
	return e.sqliteErr
}

// schedSQLiteDSN is the scheduler's own SQLite file in the run's temporary
// directory, with the lock scenarios' settings.
func (e *env) schedSQLiteDSN() string {
	return fmt.Sprintf("file:%s?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)", filepath.Join(e.sqliteDir, "sched.db"))
}

// schedSystem is one contestant deployed: 4 instances on their own pools,
// and a way to schedule executions by id.
type schedSystem interface {
	// schedule inserts executions of ids, due now, and returns once they
	// are committed.
	schedule(ctx context.Context, ids []int) error
	// start starts the instances; stop stops them and waits for them.
	start(ctx context.Context) error
	stop()
	// left counts the executions not yet run and written.
	left(ctx context.Context) (int64, error)
	base() *schedBase
	close()
}

// schedBase is what every schedSystem has: its pools, its tally, its
// count of logged errors.
type schedBase struct {
	s      *schedDBs
	t      *tally
	server string
	table  string // analyzed before a run on PostgreSQL
	errs   atomic.Int64
}

func (b *schedBase) base() *schedBase { return b }

func (b *schedBase) close() { b.s.close() }

// dialect is lockreg's name of b's server's SQL.
func (b *schedBase) dialect() jdbc.Dialect {
	return map[string]jdbc.Dialect{"postgres": jdbc.Postgres, "mariadb": jdbc.MySQL, "sqlite": jdbc.SQLite}[b.server]
}

// ready is called on a prepared table before the instances start: on
// PostgreSQL it analyzes table and takes a checkpoint, so that no
// contestant pays for another's writes.
func (b *schedBase) ready(ctx context.Context, table string) error {
	if b.server != "postgres" {
		return nil
	}
	for _, q := range []string{"ANALYZE " + table, "CHECKPOINT"} {
		if _, err := b.s.admin.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	return nil
}

// schedDBs are the instances' pools, counted, and one uncounted pool for
// set-up, the producers and watching the table.
type schedDBs struct {
	dbs   []*sql.DB
	cs    []*counter
	admin *sql.DB
}

func openSchedDBs(e *env, server string) (*schedDBs, error) {
	open := func(pool int) (*sql.DB, *counter, error) {
		switch server {
		case "postgres":
			return openPgx(e.pgDSN, pool)
		case "mariadb":
			return openCounted("mysql", e.myDSN, pool)
		}
		return openCounted("sqlite", e.schedSQLiteDSN(), pool)
	}
	s := &schedDBs{}
	admin, _, err := open(4)
	if err != nil {
		return nil, err
	}
	s.admin = admin
	for range schedInstances {
		db, c, err := open(schedPool)
		if err != nil {
			s.close()
			return nil, err
		}
		s.dbs, s.cs = append(s.dbs, db), append(s.cs, c)
	}
	return s, nil
}

// counts are the statements and commits the instances sent so far.
func (s *schedDBs) counts() (stmts, commits int64) {
	for _, c := range s.cs {
		stmts += c.n.Load()
		commits += c.commits.Load()
	}
	return stmts, commits
}

func (s *schedDBs) close() {
	for _, db := range s.dbs {
		db.Close()
	}
	if s.admin != nil {
		s.admin.Close()
	}
}

// tally records the runs of each execution by id (0, 1, ... in the order
// scheduled) and, when timed, the commit of its schedule and the start of
// its first run.
type tally struct {
	timed bool

	mu                 sync.Mutex
	runs               []uint8
	committed, started []time.Time

	done, dups, strays atomic.Int64
}

// ran records a handler call of execution inst (the decimal id).
func (t *tally) ran(inst string) {
	now := time.Now()
	id, err := strconv.Atoi(inst)
	if err != nil || id < 0 || id > 1<<28 {
		t.strays.Add(1)
		return
	}
	t.mu.Lock()
	t.grow(id)
	if t.runs[id] < 255 {
		t.runs[id]++
	}
	if t.runs[id] == 2 {
		t.dups.Add(1)
	}
	if t.timed && t.started[id].IsZero() {
		t.started[id] = now
	}
	t.mu.Unlock()
	t.done.Add(1)
}

// commit records that the schedule of id was committed at at.
func (t *tally) commit(id int, at time.Time) {
	t.mu.Lock()
	t.grow(id)
	t.committed[id] = at
	t.mu.Unlock()
}

func (t *tally) grow(id int) {
	for len(t.runs) <= id {
		t.runs = append(t.runs, 0)
		if t.timed {
			t.committed, t.started = append(t.committed, time.Time{}), append(t.started, time.Time{})
		}
	}
}

// missing counts the ids below n that never ran.
func (t *tally) missing(n int) int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	var k int64
	for id := range n {
		if id >= len(t.runs) || t.runs[id] == 0 {
			k++
		}
	}
	return k
}

// waitDrained waits until the tally has n runs and the system has no
// execution left, within timeout.
func waitDrained(ctx context.Context, sys schedSystem, t *tally, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for t.done.Load() < int64(n) {
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d executions ran within %v", t.done.Load(), n, timeout)
		}
		if err := sleep(ctx, 2*time.Millisecond); err != nil {
			return err
		}
	}
	for {
		k, err := sys.left(ctx)
		if err != nil {
			return err
		}
		if k == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d executions left after %v", k, timeout)
		}
		if err := sleep(ctx, 2*time.Millisecond); err != nil {
			return err
		}
	}
}

// schedTimeout bounds the run of n executions: generous, a safety net only.
func schedTimeout(n int) time.Duration {
	return 2*time.Minute + time.Duration(n)*5*time.Millisecond
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

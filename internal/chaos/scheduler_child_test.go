//go:build chaos

package chaos

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/lockreg/lockreg/internal/testdb"
	"github.com/lockreg/lockreg/jdbc"
	"github.com/lockreg/lockreg/jdbc/pgxlisten"
	"github.com/lockreg/lockreg/scheduler"
)

// A scheduler child (mode "scheduler") runs one scheduler on the table in
// tableEnv with two tasks: schedOnce, a one-time task, and schedTick, a
// recurring one on the schedule in scheduleEnv. Each run of either first
// records itself in chaos_sched_run under its pick version, then works
// for handleEnv. The child reports on standard output, in lines that start
// with schedPrefix:
//
//	sched ready
//	sched outcome KIND TASK INSTANCE VERSION   (refused, unrecorded, failed, abandoned)
//	sched violation TASK INSTANCE VERSION      (a second run under one pick version)
//	sched revived TASK INSTANCE VERSION BY     (a dead execution it revived, picked by BY)
//	sched stopped ERR
//
// It runs until its standard input closes, then stops its scheduler
// gracefully. With zoneEnv set, its MySQL/MariaDB times are in that zone
// (Config.TimeZone). A db-scheduler child (mode "dbscheduler",
// scheduler_java_test.go) reports in the same lines.
const (
	tableEnv    = "LOCKREG_CHAOS_TABLE"
	scheduleEnv = "LOCKREG_CHAOS_SCHEDULE"
	handleEnv   = "LOCKREG_CHAOS_HANDLE"
	zoneEnv     = "LOCKREG_CHAOS_ZONE"
	schedPrefix = "sched "

	schedOnce = "chaos-once"
	schedTick = "chaos-tick"
)

// schedRunTable records every run that started: (task, instance, version)
// is unique, so a version picked twice fails the second run's insert. due
// is the execution time the run was for, in milliseconds since 1970.
const schedRunTable = `CREATE TABLE IF NOT EXISTS chaos_sched_run (run VARCHAR(64) NOT NULL,
	task VARCHAR(100) NOT NULL, inst VARCHAR(100) NOT NULL, version BIGINT NOT NULL,
	proc INT NOT NULL, due BIGINT NOT NULL, PRIMARY KEY (run, task, inst, version))`

// schedHeartbeat makes an execution dead after four seconds without
// heartbeats, by the database's clock (MissedHeartbeats 4).
func schedHeartbeat(testdb.Backend) time.Duration { return time.Second }

const schedMissed = 4

// schedConfig is the Config every scheduler child and the parent's client
// use for table on b.
func schedConfig(b testdb.Backend, table string, tasks ...scheduler.Task) scheduler.Config {
	return scheduler.Config{Table: table, Dialect: b.Dialect, Tasks: tasks,
		Threads: 8, PollInterval: 100 * time.Millisecond,
		HeartbeatInterval: schedHeartbeat(b), MissedHeartbeats: schedMissed}
}

// outcomeLog turns the scheduler's log records of executions that did not
// end in a recorded success into report lines.
type outcomeLog struct {
	report func(format string, args ...any)
	attrs  []slog.Attr
}

var outcomeKinds = map[string]string{
	"scheduler: completion refused: the execution was taken from this scheduler":                    "refused",
	"scheduler: completion not recorded; the execution is revived as dead later":                    "unrecorded",
	"scheduler: completion's outcome unknown: an attempt whose reply was lost may have recorded it": "unrecorded",
	"scheduler: execution failed": "failed",
	"scheduler: execution abandoned at Stop: it is unpicked for another node": "abandoned",
}

func (outcomeLog) Enabled(context.Context, slog.Level) bool { return true }

func (h outcomeLog) Handle(_ context.Context, r slog.Record) error {
	kind, ok := outcomeKinds[r.Message]
	if r.Message == "scheduler: dead execution handled" {
		h.report("revived %s %s %s %s", h.attr(r, "task"), h.attr(r, "instance"), h.attr(r, "version"), cmp.Or(h.attr(r, "picked_by"), "-"))
		return nil
	}
	if !ok {
		if r.Level >= slog.LevelWarn {
			fmt.Fprintf(os.Stderr, "%s %s\n", r.Message, h.text(r))
		}
		return nil
	}
	h.report("outcome %s %s %s %s", kind, h.attr(r, "task"), h.attr(r, "instance"), h.attr(r, "version"))
	return nil
}

// attr is the value of r's attribute key, "" when it has none.
func (outcomeLog) attr(r slog.Record, key string) (v string) {
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			v = a.Value.String()
			return false
		}
		return true
	})
	return v
}

func (h outcomeLog) text(r slog.Record) string {
	var b strings.Builder
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	return b.String()
}

func (h outcomeLog) WithAttrs(as []slog.Attr) slog.Handler {
	return outcomeLog{h.report, append(h.attrs[:len(h.attrs):len(h.attrs)], as...)}
}
func (h outcomeLog) WithGroup(string) slog.Handler { return h }

// schedChild is, in a scheduler or db-scheduler child, the child with its
// database open, its report lines, its handlers' work time and its zone
// (nil when zoneEnv is not set).
type schedChild struct {
	*child
	report func(format string, args ...any)
	work   time.Duration
	zone   *time.Location
}

// readSchedChild reads a scheduler or db-scheduler child's environment;
// the caller closes c.b.DB.
func readSchedChild() (*schedChild, error) {
	ch, err := readChildEnv()
	if err != nil {
		return nil, err
	}
	c := &schedChild{child: ch, report: newReporter()}
	if c.work, err = time.ParseDuration(os.Getenv(handleEnv)); err == nil {
		if z := os.Getenv(zoneEnv); z != "" {
			c.zone, err = time.LoadLocation(z)
		}
	}
	if err != nil {
		ch.b.DB.Close()
		return nil, err
	}
	// Idle connections are kept: handlers, completions and heartbeats use
	// up to Threads+3 at once.
	c.b.DB.SetMaxIdleConns(c.workers + 4)
	return c, nil
}

// childScheduler is the body of a scheduler child.
func childScheduler() error {
	c, err := readSchedChild()
	if err != nil {
		return err
	}
	defer c.b.DB.Close()
	report := c.report
	sched, err := parseSchedule(os.Getenv(scheduleEnv))
	if err != nil {
		return err
	}
	run := func(ctx context.Context, e *scheduler.Execution) error {
		return c.recordRun(ctx, e.Task, e.Instance, e.Version, e.Time)
	}
	retry := scheduler.OnFailure(scheduler.RetryAfter(100 * time.Millisecond))
	cfg := schedConfig(c.b, os.Getenv(tableEnv),
		scheduler.OneTime(schedOnce, run, retry),
		scheduler.Recurring(schedTick, sched, run))
	cfg.Name = fmt.Sprintf("chaos-sched-%d", c.proc)
	cfg.Threads = c.workers
	cfg.TimeZone = c.zone
	cfg.Logger = slog.New(outcomeLog{report: report})
	if c.b.Dialect == jdbc.Postgres {
		cfg.Listener = pgxlisten.New(c.b.DB)
	}
	s, err := scheduler.New(c.b.DB, cfg)
	if err != nil {
		return err
	}
	if err := s.Start(context.Background()); err != nil {
		return err
	}
	report("ready")
	io.Copy(io.Discard, bufio.NewReader(os.Stdin)) // until the parent closes it
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = s.Stop(ctx)
	report("stopped %v", err)
	return err
}

// newReporter returns the function that prints a child's report lines,
// safe for concurrent use.
func newReporter() func(format string, args ...any) {
	var mu sync.Mutex
	return func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Printf(schedPrefix+format+"\n", args...)
	}
}

// recordRun is the handler of both kinds of scheduler child: it records
// the run of task's instance under its pick version in chaos_sched_run,
// reporting a violation when that version ran already, then works for
// c.work. An error leaves the execution not run, to be retried.
func (c *schedChild) recordRun(ctx context.Context, task, inst string, version int64, due time.Time) error {
	if _, err := c.b.DB.ExecContext(ctx, c.b.Q(`INSERT INTO chaos_sched_run (run, task, inst, version, proc, due) VALUES (?, ?, ?, ?, ?, ?)`),
		c.run, task, inst, version, c.proc, due.UnixMilli()); err != nil {
		if isDuplicate(err) {
			c.report("violation %s %s %d", task, inst, version)
		}
		return err
	}
	select {
	case <-time.After(c.work):
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// parseSchedule is scheduler.Parse, and CRON|expr for a cron schedule in
// UTC.
func parseSchedule(s string) (scheduler.Schedule, error) {
	if expr, ok := strings.CutPrefix(s, "CRON|"); ok {
		return scheduler.Cron(expr, time.UTC)
	}
	return scheduler.Parse(s)
}

// isDuplicate reports a unique-key violation, on any of the databases.
func isDuplicate(err error) bool {
	var coded interface{ SQLState() string }
	if errors.As(err, &coded) && coded.SQLState() == "23505" {
		return true
	}
	s := err.Error()
	return strings.Contains(s, "Duplicate entry") || strings.Contains(s, "UNIQUE constraint failed") ||
		strings.Contains(s, "duplicate key")
}

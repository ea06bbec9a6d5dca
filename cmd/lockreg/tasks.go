package main

// The tasks commands: the executions of package scheduler's table
// (db-scheduler's scheduled_tasks), through a scheduler.Client that knows
// no tasks, so that it reads, reschedules and cancels the executions of any
// task name, Java's included.

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/lockreg/lockreg/jdbc"
	"github.com/lockreg/lockreg/scheduler"
)

// tasksCommand is a command on the scheduler's table: the flags of every
// command, -table and -time-zone.
type tasksCommand struct {
	*command
	table, zone string
}

func newTasksCommand(name string, out io.Writer) *tasksCommand {
	c := &tasksCommand{command: newCommand(name, out)}
	c.fs.StringVar(&c.table, "table", scheduler.DefaultTable, "")
	c.fs.StringVar(&c.zone, "time-zone", "", "")
	return c
}

// client returns a client of the table that knows no tasks: it refuses no
// task name, and reschedules and cancels without scheduling anything.
func (c *tasksCommand) client() (*scheduler.Client, error) {
	cfg := scheduler.Config{Table: c.table, Dialect: c.dialect}
	if c.zone != "" {
		if c.dialect != jdbc.MySQL {
			return nil, fmt.Errorf("%w: %s: -time-zone is for MySQL/MariaDB, whose DATETIME columns have no zone; %s's times have one",
				errUsage, c.fs.Name(), c.dialect)
		}
		loc, err := time.LoadLocation(c.zone)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: -time-zone: %v", errUsage, c.fs.Name(), err)
		}
		cfg.TimeZone = loc
	}
	cl, err := scheduler.NewClient(c.db, cfg)
	if errors.Is(err, scheduler.ErrInvalidConfig) {
		return nil, fmt.Errorf("%w: %s: %v", errUsage, c.fs.Name(), err)
	}
	return cl, err
}

// explain words the client's ErrNotFound and ErrPicked for the person at
// the shell; other errors are returned as they are.
func (c *tasksCommand) explain(err error, task, id string) error {
	switch {
	case errors.Is(err, scheduler.ErrNotFound):
		return fmt.Errorf("no execution of task %q with instance %q in table %s", task, id, c.table)
	case errors.Is(err, scheduler.ErrPicked):
		return fmt.Errorf("%s: %w: a scheduler is running it or about to, and would write its completion over the change; "+
			"try again when it is done (a dead scheduler's execution is unpicked when another revives it)", c.fs.Name(), err)
	}
	return err
}

// execution is an execution as the CLI prints it in JSON.
type execution struct {
	Task                string     `json:"task"`
	Instance            string     `json:"instance"`
	ExecutionTime       time.Time  `json:"execution_time"`
	Picked              bool       `json:"picked"`
	PickedBy            string     `json:"picked_by,omitempty"`
	LastHeartbeat       *time.Time `json:"last_heartbeat,omitempty"`
	ConsecutiveFailures int        `json:"consecutive_failures"`
	LastSuccess         *time.Time `json:"last_success,omitempty"`
	LastFailure         *time.Time `json:"last_failure,omitempty"`
	Version             int64      `json:"version"`
	Priority            int        `json:"priority"`
	// TaskData is task_data when it is JSON (Go's and Gson/Jackson's),
	// and TaskDataBytes otherwise (Java serialization), base64 in JSON.
	TaskData      json.RawMessage `json:"task_data,omitempty"`
	TaskDataBytes []byte          `json:"task_data_bytes,omitempty"`
}

func executionOf(e *scheduler.Execution, withData bool) execution {
	opt := func(t time.Time) *time.Time {
		if t.IsZero() {
			return nil
		}
		t = t.UTC()
		return &t
	}
	out := execution{Task: e.Task, Instance: e.Instance, ExecutionTime: e.Time.UTC(), Picked: e.Picked, PickedBy: e.PickedBy,
		LastHeartbeat: opt(e.LastHeartbeat), ConsecutiveFailures: e.ConsecutiveFailures, LastSuccess: opt(e.LastSuccess),
		LastFailure: opt(e.LastFailure), Version: e.Version, Priority: e.Priority}
	if withData && len(e.Data) > 0 {
		if json.Valid(e.Data) {
			out.TaskData = json.RawMessage(e.Data)
		} else {
			out.TaskDataBytes = e.Data
		}
	}
	return out
}

var executionHeader = []string{"TASK", "INSTANCE", "EXECUTION TIME", "PICKED", "PICKED BY", "LAST HEARTBEAT", "FAILURES",
	"LAST SUCCESS", "LAST FAILURE", "VERSION", "PRIORITY"}

func (e execution) row() []string {
	opt := func(t *time.Time) string {
		if t == nil {
			return ""
		}
		return t.Format(time.RFC3339Nano)
	}
	picked := "no"
	if e.Picked {
		picked = "yes"
	}
	return []string{e.Task, e.Instance, e.ExecutionTime.Format(time.RFC3339Nano), picked, e.PickedBy, opt(e.LastHeartbeat),
		fmt.Sprint(e.ConsecutiveFailures), opt(e.LastSuccess), opt(e.LastFailure), fmt.Sprint(e.Version), fmt.Sprint(e.Priority)}
}

var taskStates = map[string]scheduler.State{
	"": scheduler.All, "all": scheduler.All, "due": scheduler.Due, "picked": scheduler.Picked,
	"failing": scheduler.Failing, "waiting": scheduler.Waiting,
}

func tasksList(ctx context.Context, args []string, out io.Writer) error {
	c := newTasksCommand("tasks list", out)
	task := c.fs.String("task", "", "")
	state := c.fs.String("state", "all", "")
	limit := c.fs.Int("limit", 0, "")
	if _, err := c.parse(args, 0, ""); err != nil {
		return err
	}
	defer c.close()
	st, ok := taskStates[*state]
	if !ok {
		return fmt.Errorf("%w: tasks list: -state %q: want all, due, picked, failing or waiting", errUsage, *state)
	}
	if *limit < 0 {
		return fmt.Errorf("%w: tasks list: -limit %d: must not be negative", errUsage, *limit)
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	es, err := cl.List(ctx, scheduler.Filter{Task: *task, State: st, Limit: *limit})
	if err != nil {
		return err
	}
	list := make([]execution, 0, len(es))
	var rows [][]string
	for _, e := range es {
		list = append(list, executionOf(e, false))
		rows = append(rows, executionOf(e, false).row())
	}
	return c.print(list, executionHeader, rows)
}

func tasksShow(ctx context.Context, args []string, out io.Writer) error {
	c := newTasksCommand("tasks show", out)
	rest, err := c.parse(args, 2, "TASK and INSTANCE")
	if err != nil {
		return err
	}
	defer c.close()
	cl, err := c.client()
	if err != nil {
		return err
	}
	e, err := cl.Get(ctx, rest[0], rest[1])
	if err != nil {
		return c.explain(err, rest[0], rest[1])
	}
	x := executionOf(e, true)
	if c.json {
		return c.print(x, nil, nil)
	}
	if err := c.print(nil, executionHeader, [][]string{x.row()}); err != nil {
		return err
	}
	data := string(x.TaskData)
	switch {
	case x.TaskDataBytes != nil:
		data = fmt.Sprintf("(%d bytes, not JSON: Java serialization?)", len(x.TaskDataBytes))
	case x.TaskData == nil:
		data = "(none)"
	}
	_, err = fmt.Fprintf(c.out, "\ntask_data: %s\n", data)
	return err
}

func tasksReschedule(ctx context.Context, args []string, out io.Writer) error {
	c := newTasksCommand("tasks reschedule", out)
	at := c.fs.String("at", "", "")
	in := c.fs.Duration("in", 0, "")
	rest, err := c.parse(args, 2, "TASK and INSTANCE")
	if err != nil {
		return err
	}
	defer c.close()
	set := map[string]bool{}
	c.fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var when time.Time
	switch {
	case set["at"] == set["in"]:
		return fmt.Errorf("%w: tasks reschedule needs one of -at TIME (RFC 3339) and -in DURATION", errUsage)
	case set["at"]:
		if when, err = time.Parse(time.RFC3339Nano, *at); err != nil {
			return fmt.Errorf("%w: tasks reschedule: -at %q: want an RFC 3339 time such as 2030-01-02T15:04:05Z", errUsage, *at)
		}
	default:
		when = time.Now().Add(*in)
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	// No Data: the execution keeps its own.
	if err := cl.Reschedule(ctx, scheduler.Instance{Task: rest[0], ID: rest[1]}, when); err != nil {
		return c.explain(err, rest[0], rest[1])
	}
	return c.message(fmt.Sprintf("rescheduled %s/%s to %s", rest[0], rest[1], when.UTC().Format(time.RFC3339Nano)),
		map[string]any{"rescheduled": true, "execution_time": when.UTC()})
}

func tasksCancel(ctx context.Context, args []string, out io.Writer) error {
	c := newTasksCommand("tasks cancel", out)
	force := c.fs.Bool("force", false, "")
	rest, err := c.parse(args, 2, "TASK and INSTANCE")
	if err != nil {
		return err
	}
	defer c.close()
	if !*force {
		return fmt.Errorf("%w: tasks cancel deletes the execution and its data: it never runs (a recurring task's "+
			"until a scheduler's Start schedules it again): add -force to do it", errUsage)
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	if err := cl.Cancel(ctx, rest[0], rest[1]); err != nil {
		return c.explain(err, rest[0], rest[1])
	}
	return c.message(fmt.Sprintf("cancelled %s/%s", rest[0], rest[1]), map[string]any{"cancelled": true})
}

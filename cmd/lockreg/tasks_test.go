package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // Europe/Rome without the host's zoneinfo

	"github.com/google/uuid"

	"github.com/lockreg/lockreg/jdbc"
	"github.com/lockreg/lockreg/scheduler"
)

// taskTable is a scheduler table of the test's own, and a client of it
// that knows no tasks.
type taskTable struct {
	target
	table string
	c     *scheduler.Client
}

// newTaskTable creates a fresh scheduler table on tg with CreateSchema,
// dropped when t ends. A non-nil zone is the table's Config.TimeZone
// (MySQL/MariaDB).
func newTaskTable(t *testing.T, tg target, zone *time.Location) taskTable {
	t.Helper()
	table := "cli_st_" + strings.ReplaceAll(uuid.NewString(), "-", "")[:10]
	cfg := scheduler.Config{Table: table, Dialect: tg.dialect, TimeZone: zone}
	ctx := context.Background()
	if err := scheduler.CreateSchema(ctx, tg.db, cfg); err != nil {
		t.Fatalf("CreateSchema: %v", err)
	}
	t.Cleanup(func() { tg.db.ExecContext(context.Background(), `DROP TABLE `+table) })
	c, err := scheduler.NewClient(tg.db, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return taskTable{target: tg, table: table, c: c}
}

// tasks runs "lockreg tasks SUB -table TABLE ARGS..." (args[0] is SUB).
func (tt taskTable) tasks(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return tt.lockreg(t, append([]string{"tasks", args[0], "-table", tt.table}, args[1:]...)...)
}

func (tt taskTable) mustTasks(t *testing.T, args ...string) string {
	t.Helper()
	out, errOut, code := tt.tasks(t, args...)
	if code != 0 {
		t.Fatalf("lockreg tasks %v: exit %d: %s", args, code, errOut)
	}
	return out
}

func (tt taskTable) schedule(t *testing.T, task, id string, data any, at time.Time) {
	t.Helper()
	if err := tt.c.Schedule(context.Background(), scheduler.Instance{Task: task, ID: id, Data: data}, at); err != nil {
		t.Fatal(err)
	}
}

// pick marks an execution picked by node, as a scheduler running it has.
func (tt taskTable) pick(t *testing.T, task, id, node string) {
	t.Helper()
	if _, err := tt.db.ExecContext(context.Background(), `UPDATE `+tt.table+` SET picked = true, picked_by = '`+node+
		`', version = version + 1 WHERE task_name = '`+task+`' AND task_instance = '`+id+`'`); err != nil {
		t.Fatal(err)
	}
}

type listed struct {
	Task, Instance      string
	ExecutionTime       time.Time `json:"execution_time"`
	Picked              bool
	PickedBy            string `json:"picked_by"`
	ConsecutiveFailures int    `json:"consecutive_failures"`
	Version             int64
	TaskData            json.RawMessage `json:"task_data"`
}

func (tt taskTable) list(t *testing.T, args ...string) []string {
	t.Helper()
	var got []listed
	if err := json.Unmarshal([]byte(tt.mustTasks(t, append([]string{"list", "-json"}, args...)...)), &got); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, e := range got {
		ids = append(ids, e.Task+"/"+e.Instance)
	}
	return ids
}

func TestTasksListShowsScheduledExecutionsFilteredByTaskAndState(t *testing.T) {
	forEachBackend(t, func(t *testing.T, tg target) {
		tt := newTaskTable(t, tg, nil)
		now := time.Now()
		tt.schedule(t, "mail", "due", nil, now.Add(-time.Hour))
		tt.schedule(t, "mail", "later", nil, now.Add(time.Hour))
		tt.schedule(t, "report", "running", nil, now.Add(-2*time.Hour))
		tt.schedule(t, "report", "failing", nil, now.Add(2*time.Hour))
		tt.pick(t, "report", "running", "node-1")
		if _, err := tt.db.ExecContext(context.Background(),
			`UPDATE `+tt.table+` SET consecutive_failures = 3 WHERE task_instance = 'failing'`); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			args []string
			want string
		}{
			{nil, "report/running mail/due mail/later report/failing"}, // in execution time order
			{[]string{"-state", "all", "-task", "mail"}, "mail/due mail/later"},
			{[]string{"-state", "due"}, "mail/due"},
			{[]string{"-state", "picked"}, "report/running"},
			{[]string{"-state", "failing"}, "report/failing"},
			{[]string{"-state", "waiting", "-task", "mail"}, "mail/later"},
			{[]string{"-limit", "1"}, "report/running"},
			{[]string{"-task", "nobody"}, ""},
		} {
			if got := strings.Join(tt.list(t, c.args...), " "); got != c.want {
				t.Errorf("tasks list %v: %q, want %q", c.args, got, c.want)
			}
		}
		table := tt.mustTasks(t, "list", "-state", "picked")
		for _, want := range []string{"TASK", "PICKED BY", "LAST HEARTBEAT", "FAILURES", "PRIORITY", "report", "running", "yes", "node-1"} {
			if !strings.Contains(table, want) {
				t.Errorf("tasks list -state picked lacks %q:\n%s", want, table)
			}
		}
	})
}

func TestTasksShowPrintsOneExecutionWithItsData(t *testing.T) {
	forEachBackend(t, func(t *testing.T, tg target) {
		tt := newTaskTable(t, tg, nil)
		at := time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC)
		tt.schedule(t, "mail", "order-7", map[string]string{"to": "ann@example.com"}, at)
		out := tt.mustTasks(t, "show", "mail", "order-7")
		for _, want := range []string{"mail", "order-7", "2031-05-06T07:08:09Z", "EXECUTION TIME", `task_data: {"to":"ann@example.com"}`} {
			if !strings.Contains(out, want) {
				t.Errorf("tasks show lacks %q:\n%s", want, out)
			}
		}
		var got listed
		if err := json.Unmarshal([]byte(tt.mustTasks(t, "show", "-json", "mail", "order-7")), &got); err != nil {
			t.Fatal(err)
		}
		var data bytes.Buffer // -json indents it
		if err := json.Compact(&data, got.TaskData); err != nil {
			t.Fatal(err)
		}
		if got.Task != "mail" || got.Instance != "order-7" || !got.ExecutionTime.Equal(at) || got.Picked ||
			data.String() != `{"to":"ann@example.com"}` {
			t.Fatalf("tasks show -json: %+v", got)
		}
	})
}

func TestTasksShowOfAMissingExecutionFails(t *testing.T) {
	forEachBackend(t, func(t *testing.T, tg target) {
		tt := newTaskTable(t, tg, nil)
		_, errOut, code := tt.tasks(t, "show", "mail", "nobody")
		if code != 1 || !strings.Contains(errOut, `no execution of task "mail" with instance "nobody" in table `+tt.table) {
			t.Fatalf("exit %d, %q; want 1 and a message", code, errOut)
		}
	})
}

func TestTasksRescheduleMovesTheExecutionTimeAndKeepsItsData(t *testing.T) {
	forEachBackend(t, func(t *testing.T, tg target) {
		tt := newTaskTable(t, tg, nil)
		ctx := context.Background()
		tt.schedule(t, "mail", "1", map[string]int{"n": 42}, time.Now().Add(time.Hour))
		tt.mustTasks(t, "reschedule", "-at", "2030-01-02T03:04:05+01:00", "mail", "1")
		e, err := tt.c.Get(ctx, "mail", "1")
		if err != nil {
			t.Fatal(err)
		}
		if want := time.Date(2030, 1, 2, 2, 4, 5, 0, time.UTC); !e.Time.Equal(want) || string(e.Data) != `{"n":42}` {
			t.Fatalf("after -at: %v, %s; want %v and the data kept", e.Time, e.Data, want)
		}
		before := time.Now()
		tt.mustTasks(t, "reschedule", "-in", "2h", "mail", "1")
		if e, err = tt.c.Get(ctx, "mail", "1"); err != nil {
			t.Fatal(err)
		}
		if lo, hi := before.Add(2*time.Hour-time.Second), time.Now().Add(2*time.Hour+time.Second); e.Time.Before(lo) || e.Time.After(hi) ||
			string(e.Data) != `{"n":42}` {
			t.Fatalf("after -in 2h: %v, %s; want in [%v, %v] and the data kept", e.Time, e.Data, lo, hi)
		}
		if _, errOut, code := tt.tasks(t, "reschedule", "-in", "1h", "mail", "nobody"); code != 1 || !strings.Contains(errOut, "no execution") {
			t.Fatalf("reschedule of a missing execution: exit %d, %q; want 1", code, errOut)
		}
	})
}

func TestTasksCancelNeedsForceAndThenDeletes(t *testing.T) {
	forEachBackend(t, func(t *testing.T, tg target) {
		tt := newTaskTable(t, tg, nil)
		ctx := context.Background()
		tt.schedule(t, "mail", "1", "x", time.Now())
		if _, errOut, code := tt.tasks(t, "cancel", "mail", "1"); code != 2 || !strings.Contains(errOut, "-force") {
			t.Fatalf("cancel without -force: exit %d, %q; want 2 asking for -force", code, errOut)
		}
		if _, err := tt.c.Get(ctx, "mail", "1"); err != nil {
			t.Fatalf("the execution is gone without -force: %v", err)
		}
		tt.mustTasks(t, "cancel", "-force", "mail", "1")
		if _, err := tt.c.Get(ctx, "mail", "1"); !errors.Is(err, scheduler.ErrNotFound) {
			t.Fatalf("Get after cancel: %v, want ErrNotFound", err)
		}
		if _, errOut, code := tt.tasks(t, "cancel", "-force", "mail", "1"); code != 1 || !strings.Contains(errOut, "no execution") {
			t.Fatalf("cancel of a cancelled execution: exit %d, %q; want 1", code, errOut)
		}
	})
}

func TestTasksCancelOfAPickedExecutionIsRefused(t *testing.T) {
	forEachBackend(t, func(t *testing.T, tg target) {
		tt := newTaskTable(t, tg, nil)
		tt.schedule(t, "mail", "1", "x", time.Now())
		tt.pick(t, "mail", "1", "node-1")
		_, errOut, code := tt.tasks(t, "cancel", "-force", "mail", "1")
		if code != 1 || !strings.Contains(errOut, "picked") || !strings.Contains(errOut, "node-1") {
			t.Fatalf("cancel of a picked execution: exit %d, %q; want 1 naming the scheduler", code, errOut)
		}
		if _, err := tt.c.Get(context.Background(), "mail", "1"); err != nil {
			t.Fatalf("the picked execution is gone: %v", err)
		}
	})
}

func TestTasksRescheduleOfAPickedExecutionIsRefused(t *testing.T) {
	forEachBackend(t, func(t *testing.T, tg target) {
		tt := newTaskTable(t, tg, nil)
		at := time.Now().Add(time.Hour).Truncate(time.Millisecond)
		tt.schedule(t, "mail", "1", "x", at)
		tt.pick(t, "mail", "1", "node-1")
		if _, errOut, code := tt.tasks(t, "reschedule", "-in", "1s", "mail", "1"); code != 1 || !strings.Contains(errOut, "picked") {
			t.Fatalf("reschedule of a picked execution: exit %d, %q; want 1", code, errOut)
		}
		if e, err := tt.c.Get(context.Background(), "mail", "1"); err != nil || !e.Time.Equal(at) {
			t.Fatalf("the picked execution after the refusal: %+v, %v; want it at %v", e, err, at)
		}
	})
}

func TestTasksTimeZoneReadsMySQLTimesInThatZone(t *testing.T) {
	forEachBackend(t, func(t *testing.T, tg target) {
		if tg.dialect != jdbc.MySQL {
			if _, errOut, code := tg.lockreg(t, "tasks", "list", "-time-zone", "Europe/Rome"); code != 2 || !strings.Contains(errOut, "-time-zone") {
				t.Fatalf("-time-zone on %s: exit %d, %q; want 2", tg.dialect, code, errOut)
			}
			return
		}
		rome, err := time.LoadLocation("Europe/Rome")
		if err != nil {
			t.Fatal(err) // time/tzdata, imported below, has every zone
		}
		tt := newTaskTable(t, tg, rome)
		at := time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC)
		tt.schedule(t, "mail", "1", nil, at)
		var got listed
		if err := json.Unmarshal([]byte(tt.mustTasks(t, "show", "-json", "-time-zone", "Europe/Rome", "mail", "1")), &got); err != nil {
			t.Fatal(err)
		}
		if !got.ExecutionTime.Equal(at) {
			t.Fatalf("with -time-zone Europe/Rome: %v, want %v", got.ExecutionTime, at)
		}
		if err := json.Unmarshal([]byte(tt.mustTasks(t, "show", "-json", "mail", "1")), &got); err != nil {
			t.Fatal(err)
		}
		if !got.ExecutionTime.Equal(at.Add(2 * time.Hour)) { // Rome's summer wall time read as UTC
			t.Fatalf("without -time-zone: %v, want the wall time as UTC, %v", got.ExecutionTime, at.Add(2*time.Hour))
		}
	})
}

func TestTasksUsageErrorsExitWithStatus2(t *testing.T) {
	for _, args := range [][]string{
		{"tasks"},
		{"tasks", "run"},
		{"tasks", "list", "-state", "sleeping"},
		{"tasks", "list", "-limit", "-1"},
		{"tasks", "list", "-table", "no;such"},
		{"tasks", "list", "extra"},
		{"tasks", "show", "mail"},
		{"tasks", "reschedule", "mail", "1"},
		{"tasks", "reschedule", "-at", "2030-01-02T03:04:05Z", "-in", "1h", "mail", "1"},
		{"tasks", "reschedule", "-at", "tomorrow", "mail", "1"},
		{"tasks", "reschedule", "-in", "1h", "mail"},
		{"tasks", "cancel", "mail", "1"},
		{"tasks", "cancel", "-force", "mail"},
	} {
		_, errOut, code := runBinary(t, []string{"LOCKREG_DSN=/nonexistent/x.db"}, args...)
		if code != 2 || !strings.HasPrefix(errOut, "lockreg: ") {
			t.Errorf("lockreg %v: exit %d, %q; want 2 and a message", args, code, errOut)
		}
	}
}

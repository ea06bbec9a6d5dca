package scheduler_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/lockreg/lockreg/internal/testdb"
	"github.com/lockreg/lockreg/scheduler"
)

func TestScheduleStoresTheDataAsJSONAndGetReadsItBack(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, b testdb.Backend) {
		cfg := newTable(t, b)
		c := newClient(t, b, cfg)
		at := time.Now().Add(time.Hour).Truncate(time.Millisecond)
		if err := c.Schedule(ctxb, scheduler.Instance{Task: "mail", ID: "42", Data: map[string]int{"n": 7}}, at); err != nil {
			t.Fatal(err)
		}
		e := row(t, c, "mail", "42")
		if e == nil || string(e.Data) != `{"n":7}` || !e.Time.Equal(at) || e.Picked || e.Version != 1 {
			t.Fatalf("got %+v, want data {\"n\":7}, time %v, unpicked, version 1", e, at)
		}
		var v struct{ N int }
		if err := e.Decode(&v); err != nil || v.N != 7 {
			t.Fatalf("Decode: %v %+v", err, v)
		}
	})
}

func TestScheduleOfAnExistingInstanceReturnsErrExistsAndKeepsTheRow(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, b testdb.Backend) {
		c := newClient(t, b, newTable(t, b))
		at := time.Now().Add(time.Hour)
		inst := scheduler.Instance{Task: "mail", ID: "1", Data: "first"}
		if err := c.Schedule(ctxb, inst, at); err != nil {
			t.Fatal(err)
		}
		inst.Data = "second"
		if err := c.Schedule(ctxb, inst, at); !errors.Is(err, scheduler.ErrExists) {
			t.Fatalf("second Schedule: %v, want ErrExists", err)
		}
		if ok, err := c.ScheduleIfNotExists(ctxb, inst, at); ok || err != nil {
			t.Fatalf("ScheduleIfNotExists: %v %v, want false, nil", ok, err)
		}
		if e := row(t, c, "mail", "1"); string(e.Data) != `"first"` {
			t.Fatalf("data %s, want the first", e.Data)
		}
	})
}

func TestNilDataIsStoredAsJSONNullNotSQLNull(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, b testdb.Backend) {
		c := newClient(t, b, newTable(t, b))
		if err := c.Schedule(ctxb, scheduler.Instance{Task: "t", ID: "1"}, time.Now()); err != nil {
			t.Fatal(err)
		}
		if e := row(t, c, "t", "1"); string(e.Data) != "null" {
			t.Fatalf("data %q, want null", e.Data)
		}
	})
}

func TestScheduleRejectsBadInputBeforeWritingAnything(t *testing.T) {
	b := testdb.SQLite(t)
	cfg := newTable(t, b, recorder("known", newRuns()))
	c := newClient(t, b, cfg)
	now := time.Now()
	for _, tc := range []struct {
		name string
		inst scheduler.Instance
		at   time.Time
		want error
	}{
		{"unknown task", scheduler.Instance{Task: "unknown", ID: "1"}, now, scheduler.ErrUnknownTask},
		{"empty id", scheduler.Instance{Task: "known"}, now, scheduler.ErrInvalidInstance},
		{"long id", scheduler.Instance{Task: "known", ID: string(make([]byte, 101))}, now, scheduler.ErrInvalidInstance},
		{"data that does not encode", scheduler.Instance{Task: "known", ID: "1", Data: math.Inf(1)}, now, scheduler.ErrData},
		{"invalid raw JSON", scheduler.Instance{Task: "known", ID: "1", Data: json.RawMessage("{")}, now, scheduler.ErrData},
		{"zero time", scheduler.Instance{Task: "known", ID: "1"}, time.Time{}, scheduler.ErrInvalidInstance},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := c.Schedule(ctxb, tc.inst, tc.at); !errors.Is(err, tc.want) {
				t.Fatalf("Schedule: %v, want %v", err, tc.want)
			}
		})
	}
	if all, err := c.List(ctxb, scheduler.Filter{}); err != nil || len(all) != 0 {
		t.Fatalf("List: %v %v, want nothing written", all, err)
	}
}

func TestRescheduleMovesTheTimeAndReplacesTheDataWhenGiven(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, b testdb.Backend) {
		c := newClient(t, b, newTable(t, b))
		at := time.Now().Add(time.Hour).Truncate(time.Millisecond)
		c.Schedule(ctxb, scheduler.Instance{Task: "t", ID: "1", Data: 1}, at)
		later := at.Add(time.Hour)
		if err := c.Reschedule(ctxb, scheduler.Instance{Task: "t", ID: "1"}, later); err != nil {
			t.Fatal(err)
		}
		if e := row(t, c, "t", "1"); !e.Time.Equal(later) || string(e.Data) != "1" || e.Version != 2 {
			t.Fatalf("after Reschedule: %+v", e)
		}
		if err := c.Reschedule(ctxb, scheduler.Instance{Task: "t", ID: "1", Data: 2}, at); err != nil {
			t.Fatal(err)
		}
		if e := row(t, c, "t", "1"); !e.Time.Equal(at) || string(e.Data) != "2" || e.Version != 3 {
			t.Fatalf("after Reschedule with data: %+v", e)
		}
	})
}

func TestRescheduleAndCancelOfAMissingExecutionReturnErrNotFound(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, b testdb.Backend) {
		c := newClient(t, b, newTable(t, b))
		if err := c.Reschedule(ctxb, scheduler.Instance{Task: "t", ID: "x"}, time.Now()); !errors.Is(err, scheduler.ErrNotFound) {
			t.Fatalf("Reschedule: %v", err)
		}
		if err := c.Cancel(ctxb, "t", "x"); !errors.Is(err, scheduler.ErrNotFound) {
			t.Fatalf("Cancel: %v", err)
		}
		if _, err := c.Get(ctxb, "t", "x"); !errors.Is(err, scheduler.ErrNotFound) {
			t.Fatalf("Get: %v", err)
		}
	})
}

func TestRescheduleAndCancelRefuseAPickedExecution(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, b testdb.Backend) {
		cfg := newTable(t, b)
		c := newClient(t, b, cfg)
		c.Schedule(ctxb, scheduler.Instance{Task: "t", ID: "1"}, time.Now())
		b.Exec(t, `UPDATE `+cfg.Table+` SET picked = true, picked_by = 'other' WHERE task_instance = '1'`)
		if err := c.Reschedule(ctxb, scheduler.Instance{Task: "t", ID: "1"}, time.Now()); !errors.Is(err, scheduler.ErrPicked) {
			t.Fatalf("Reschedule: %v, want ErrPicked", err)
		}
		if err := c.Cancel(ctxb, "t", "1"); !errors.Is(err, scheduler.ErrPicked) {
			t.Fatalf("Cancel: %v, want ErrPicked", err)
		}
		if row(t, c, "t", "1") == nil {
			t.Fatal("the picked execution is gone")
		}
	})
}

func TestCancelDeletesAnUnpickedExecution(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, b testdb.Backend) {
		c := newClient(t, b, newTable(t, b))
		c.Schedule(ctxb, scheduler.Instance{Task: "t", ID: "1"}, time.Now())
		if err := c.Cancel(ctxb, "t", "1"); err != nil {
			t.Fatal(err)
		}
		if e := row(t, c, "t", "1"); e != nil {
			t.Fatalf("still there: %+v", e)
		}
	})
}

func TestScheduleTxWritesOnlyWhenTheCallersTransactionCommits(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, b testdb.Backend) {
		c := newClient(t, b, newTable(t, b))
		for _, commit := range []bool{false, true} {
			tx, err := b.DB.BeginTx(ctxb, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.ScheduleTx(ctxb, tx, scheduler.Instance{Task: "t", ID: "1"}, time.Now()); err != nil {
				t.Fatal(err)
			}
			if commit {
				err = tx.Commit()
			} else {
				err = tx.Rollback()
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := row(t, c, "t", "1") != nil; got != commit {
				t.Fatalf("commit %v: row exists %v", commit, got)
			}
		}
	})
}

func TestRescheduleTxAndCancelTxTakeEffectAtCommit(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, b testdb.Backend) {
		c := newClient(t, b, newTable(t, b))
		at := time.Now().Truncate(time.Millisecond)
		c.Schedule(ctxb, scheduler.Instance{Task: "t", ID: "1"}, at)
		tx, _ := b.DB.BeginTx(ctxb, nil)
		if err := c.RescheduleTx(ctxb, tx, scheduler.Instance{Task: "t", ID: "1"}, at.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		tx.Rollback()
		if e := row(t, c, "t", "1"); !e.Time.Equal(at) {
			t.Fatalf("rolled back reschedule moved it to %v", e.Time)
		}
		tx, _ = b.DB.BeginTx(ctxb, nil)
		if err := c.CancelTx(ctxb, tx, "t", "1"); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if row(t, c, "t", "1") != nil {
			t.Fatal("committed cancel left the row")
		}
	})
}

func TestListSelectsByTaskAndState(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, b testdb.Backend) {
		cfg := newTable(t, b)
		c := newClient(t, b, cfg)
		now := time.Now()
		c.Schedule(ctxb, scheduler.Instance{Task: "a", ID: "due"}, now.Add(-time.Minute))
		c.Schedule(ctxb, scheduler.Instance{Task: "a", ID: "later"}, now.Add(time.Hour))
		c.Schedule(ctxb, scheduler.Instance{Task: "b", ID: "picked"}, now.Add(-time.Minute))
		c.Schedule(ctxb, scheduler.Instance{Task: "b", ID: "failing"}, now.Add(time.Hour))
		b.Exec(t, `UPDATE `+cfg.Table+` SET picked = true WHERE task_instance = 'picked'`)
		b.Exec(t, `UPDATE `+cfg.Table+` SET consecutive_failures = 2 WHERE task_instance = 'failing'`)
		ids := func(f scheduler.Filter) []string {
			all, err := c.List(ctxb, f)
			if err != nil {
				t.Fatal(err)
			}
			var out []string
			for _, e := range all {
				out = append(out, e.Instance)
			}
			return out
		}
		for _, tc := range []struct {
			f    scheduler.Filter
			want string
		}{
			{scheduler.Filter{}, "[due picked later failing]"},
			{scheduler.Filter{Task: "a"}, "[due later]"},
			{scheduler.Filter{State: scheduler.Due}, "[due]"},
			{scheduler.Filter{State: scheduler.Picked}, "[picked]"},
			{scheduler.Filter{State: scheduler.Failing}, "[failing]"},
			{scheduler.Filter{State: scheduler.Waiting, Task: "a"}, "[later]"},
			{scheduler.Filter{Limit: 1}, "[due]"},
		} {
			if got := fmtIDs(ids(tc.f)); got != tc.want {
				t.Errorf("List(%+v) = %s, want %s", tc.f, got, tc.want)
			}
		}
	})
}

func fmtIDs(ids []string) string {
	s := "["
	for i, id := range ids {
		if i > 0 {
			s += " "
		}
		s += id
	}
	return s + "]"
}

func TestScheduleBatchInsertsTheNewInstancesAndSkipsExistingOnes(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, b testdb.Backend) {
		c := newClient(t, b, newTable(t, b))
		at := time.Now().Add(time.Hour)
		c.Schedule(ctxb, scheduler.Instance{Task: "t", ID: "3", Data: "old"}, at)
		var insts []scheduler.Instance
		for i := range 1200 { // three statements
			insts = append(insts, scheduler.Instance{Task: "t", ID: fmt.Sprint(i), Data: i})
		}
		n, err := c.ScheduleBatch(ctxb, insts, at)
		if err != nil || n != 1199 {
			t.Fatalf("ScheduleBatch: %d, %v; want 1199 inserted", n, err)
		}
		if e := row(t, c, "t", "3"); string(e.Data) != `"old"` {
			t.Fatalf("the existing execution's data: %s", e.Data)
		}
		if e := row(t, c, "t", "1199"); e == nil || string(e.Data) != "1199" {
			t.Fatalf("the last: %+v", e)
		}
	})
}

func TestScheduleBatchWritesNothingWhenOneInstanceIsBad(t *testing.T) {
	b := testdb.SQLite(t)
	c := newClient(t, b, newTable(t, b))
	_, err := c.ScheduleBatch(ctxb, []scheduler.Instance{{Task: "t", ID: "1"}, {Task: "t", ID: ""}}, time.Now())
	if !errors.Is(err, scheduler.ErrInvalidInstance) {
		t.Fatalf("ScheduleBatch: %v", err)
	}
	if all, _ := c.List(ctxb, scheduler.Filter{}); len(all) != 0 {
		t.Fatalf("written: %d", len(all))
	}
}

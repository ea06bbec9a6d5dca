package scheduler_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"
	_ "time/tzdata" // Europe/Rome on machines without a zone database

	"github.com/lockreg/lockreg/internal/testdb"
	"github.com/lockreg/lockreg/scheduler"
)

func testdbSQLite(t *testing.T) *sql.DB { return testdb.SQLite(t).DB }

func mustLoad(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func TestFixedDelayRunsAtOnceAndThenTheDelayAfterEachEnd(t *testing.T) {
	s := scheduler.Must(scheduler.FixedDelay(30 * time.Second))
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	if got := s.Initial(now); !got.Equal(now) {
		t.Fatalf("Initial %v, want now", got)
	}
	if got := s.Next(now); !got.Equal(now.Add(30 * time.Second)) {
		t.Fatalf("Next %v", got)
	}
	if s.String() != "FIXED_DELAY|30s" {
		t.Fatalf("String %q", s)
	}
}

func TestAZeroOrNegativeFixedDelayIsAnError(t *testing.T) {
	for _, d := range []time.Duration{0, -time.Second} {
		if _, err := scheduler.FixedDelay(d); !errors.Is(err, scheduler.ErrInvalidSchedule) {
			t.Errorf("FixedDelay(%v): %v, want ErrInvalidSchedule", d, err)
		}
	}
}

func TestDailyRunsAtTheNextTimeOfDayInItsZone(t *testing.T) {
	rome := mustLoad(t, "Europe/Rome")
	s := scheduler.Must(scheduler.Daily(rome, "15:30", "12:30"))
	at := func(d, h, m int) time.Time { return time.Date(2026, 3, d, h, m, 0, 0, rome) }
	for _, tc := range []struct{ after, want time.Time }{
		{at(10, 8, 0), at(10, 12, 30)},
		{at(10, 12, 30), at(10, 15, 30)},
		{at(10, 16, 0), at(11, 12, 30)},
		{at(28, 16, 0), at(29, 12, 30)}, // across the change to summer time
	} {
		if got := s.Next(tc.after); !got.Equal(tc.want) {
			t.Errorf("Next(%v) = %v, want %v", tc.after, got, tc.want)
		}
	}
	if s.String() != "DAILY|12:30,15:30|Europe/Rome" {
		t.Fatalf("String %q", s)
	}
}

func TestDailyRejectsATimeOfDayOutOfRange(t *testing.T) {
	for _, tod := range []string{"24:00", "12:60", "1:30", "noon"} {
		if _, err := scheduler.Daily(time.UTC, tod); !errors.Is(err, scheduler.ErrInvalidSchedule) {
			t.Errorf("Daily(%q): %v", tod, err)
		}
	}
	if _, err := scheduler.Daily(time.UTC); !errors.Is(err, scheduler.ErrInvalidSchedule) {
		t.Error("Daily with no time is no error")
	}
}

func TestCronReadsSpringsSixFieldsInItsZone(t *testing.T) {
	rome := mustLoad(t, "Europe/Rome")
	s := scheduler.Must(scheduler.Cron("0 0 12 * * MON-FRI", rome))
	sat := time.Date(2026, 12, 5, 13, 0, 0, 0, rome) // a Saturday
	if got, want := s.Next(sat), time.Date(2026, 12, 7, 12, 0, 0, 0, rome); !got.Equal(want) {
		t.Fatalf("Next %v, want Monday noon %v", got, want)
	}
	every := scheduler.Must(scheduler.Cron("*/10 * * * * ?", nil))
	t0 := time.Date(2026, 1, 1, 0, 0, 3, 0, time.UTC)
	if got := every.Next(t0); !got.Equal(t0.Add(7 * time.Second)) {
		t.Fatalf("every 10 s: Next %v", got)
	}
}

func TestCronRejectsWhatItCannotReadAndDashIsDisabled(t *testing.T) {
	for _, expr := range []string{"0 12 * * *", "0 0 12 L * ?", "0 0 12 ? * MON#2", "@every 1m", "nonsense"} {
		if _, err := scheduler.Cron(expr, nil); !errors.Is(err, scheduler.ErrInvalidSchedule) {
			t.Errorf("Cron(%q): %v, want ErrInvalidSchedule", expr, err)
		}
	}
	if s, err := scheduler.Cron("-", nil); err != nil || s != scheduler.Disabled {
		t.Fatalf("Cron(-) = %v, %v", s, err)
	}
}

func TestParseReadsDBSchedulersForms(t *testing.T) {
	for in, want := range map[string]string{
		"FIXED_DELAY|30s":               "FIXED_DELAY|30s",
		"FIXED_DELAY|1m30s":             "FIXED_DELAY|90s",
		"DAILY|12:30,15:30|Europe/Rome": "DAILY|12:30,15:30|Europe/Rome",
		"DAILY|08:00":                   "DAILY|08:00",
		"-":                             "-",
	} {
		s, err := scheduler.Parse(in)
		if err != nil || s.String() != want {
			t.Errorf("Parse(%q) = %v, %v; want %s", in, s, err, want)
		}
	}
}

func TestParseRejectsAnythingElse(t *testing.T) {
	for _, in := range []string{"", "FIXED_DELAY|0s", "FIXED_DELAY|-5s", "FIXED_DELAY|x", "DAILY|25:00", "DAILY|12:00|Mars/Base", "HOURLY|1"} {
		if _, err := scheduler.Parse(in); !errors.Is(err, scheduler.ErrInvalidSchedule) {
			t.Errorf("Parse(%q): %v, want ErrInvalidSchedule", in, err)
		}
	}
}

func TestMustPanicsOnAnError(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("no panic")
		}
	}()
	scheduler.Must(scheduler.FixedDelay(0))
}

func TestABadTaskIsAConfigurationErrorAtNew(t *testing.T) {
	b := testdbSQLite(t)
	noop := func(ctx context.Context, e *scheduler.Execution) error { return nil }
	for name, tasks := range map[string][]scheduler.Task{
		"no tasks":         nil,
		"zero task":        {{}},
		"empty name":       {scheduler.OneTime("", noop)},
		"two of a name":    {scheduler.OneTime("a", noop), scheduler.OneTime("a", noop)},
		"nil schedule":     {scheduler.Recurring("r", nil, noop)},
		"data not encoded": {scheduler.Recurring("r", scheduler.Disabled, noop, scheduler.WithData(func() {}))},
	} {
		if _, err := scheduler.New(b, scheduler.Config{Tasks: tasks}); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

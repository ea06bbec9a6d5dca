package scheduler

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// ErrInvalidSchedule reports a schedule that cannot be built: a zero or
// negative delay, a cron expression or a schedule string that does not
// parse, a time of day out of range, an unknown zone. The returned error
// wraps it and says what is wrong.
var ErrInvalidSchedule = errors.New("scheduler: invalid schedule")

// A Schedule says when a recurring task runs. Implementations must be safe
// for concurrent use; the ones of this package are values.
type Schedule interface {
	// Initial returns the first execution time of a task started at now.
	Initial(now time.Time) time.Time
	// Next returns the execution time that follows an execution that ended
	// at done, with no catch-up of missed ones (db-scheduler's rule). The
	// zero time means never: the execution is removed.
	Next(done time.Time) time.Time
	// String returns the schedule in the form Parse reads, where it has one.
	String() string
}

// Disabled is the schedule "-" of db-scheduler: a recurring task with it
// has no execution, and Start removes an existing unpicked one.
var Disabled Schedule = disabled{}

type disabled struct{}

func (disabled) Initial(time.Time) time.Time { return time.Time{} }
func (disabled) Next(time.Time) time.Time    { return time.Time{} }
func (disabled) String() string              { return "-" }

// FixedDelay returns the schedule that runs a task at once when it starts
// and then d after each execution ends (db-scheduler's
// Schedules.fixedDelay). d must be positive.
func FixedDelay(d time.Duration) (Schedule, error) {
	if d <= 0 {
		return nil, fmt.Errorf("%w: fixed delay %v: must be positive", ErrInvalidSchedule, d)
	}
	return fixedDelay(d), nil
}

type fixedDelay time.Duration

func (f fixedDelay) Initial(now time.Time) time.Time { return now }
func (f fixedDelay) Next(done time.Time) time.Time   { return done.Add(time.Duration(f)) }

// String is "FIXED_DELAY|<seconds>s" for whole seconds, as db-scheduler
// writes it; a delay with a fraction of a second has no such form and is
// written as Go's duration.
func (f fixedDelay) String() string {
	if d := time.Duration(f); d%time.Second == 0 {
		return "FIXED_DELAY|" + strconv.FormatInt(int64(d/time.Second), 10) + "s"
	}
	return "FIXED_DELAY|" + time.Duration(f).String()
}

// Daily returns the schedule that runs a task every day at the given times
// of day ("15:04", 24-hour clock) in loc (db-scheduler's Schedules.daily).
// A time that a daylight-saving change skips runs at the same wall time
// shifted forward, as time.Date normalises it. loc nil is UTC.
func Daily(loc *time.Location, times ...string) (Schedule, error) {
	if loc == nil {
		loc = time.UTC
	}
	if len(times) == 0 {
		return nil, fmt.Errorf("%w: daily schedule with no time of day", ErrInvalidSchedule)
	}
	d := daily{loc: loc}
	for _, s := range times {
		t, err := time.Parse("15:04", s)
		if err != nil || len(s) != 5 {
			return nil, fmt.Errorf("%w: daily time %q: want HH:MM, 00:00 to 23:59", ErrInvalidSchedule, s)
		}
		d.minutes = append(d.minutes, t.Hour()*60+t.Minute())
	}
	slices.Sort(d.minutes)
	d.minutes = slices.Compact(d.minutes)
	return d, nil
}

type daily struct {
	loc     *time.Location
	minutes []int // minutes after midnight, sorted
}

func (d daily) Initial(now time.Time) time.Time { return d.Next(now) }

func (d daily) Next(after time.Time) time.Time {
	w := after.In(d.loc)
	for day := 0; day <= 2; day++ {
		for _, m := range d.minutes {
			t := time.Date(w.Year(), w.Month(), w.Day()+day, m/60, m%60, 0, 0, d.loc)
			if t.After(after) {
				return t
			}
		}
	}
	return time.Time{} // unreachable: some time of the next day follows after
}

func (d daily) String() string {
	var b strings.Builder
	b.WriteString("DAILY|")
	for i, m := range d.minutes {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%02d:%02d", m/60, m%60)
	}
	if d.loc != time.UTC {
		b.WriteString("|" + d.loc.String())
	}
	return b.String()
}

// cronParser reads Spring's six fields (second minute hour day-of-month
// month day-of-week, with ? and names) and the @ macros, as db-scheduler's
// cron-utils SPRING53 definition does, less what robfig/cron lacks.
var cronParser = cron.NewParser(cron.Second | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Cron returns the schedule of a Spring-style cron expression of six
// fields, "second minute hour day-of-month month day-of-week" (for example
// "0 0 12 * * MON-FRI"), or a macro (@daily, @hourly...), evaluated in loc
// (db-scheduler's Schedules.cron; loc nil is UTC, where db-scheduler
// defaults to the JVM's zone). "-" is Disabled, as in db-scheduler. Spring's
// L, W and # and a day of week 7 are not supported: they are an error here,
// never a different schedule.
func Cron(expr string, loc *time.Location) (Schedule, error) {
	expr = strings.TrimSpace(expr)
	if expr == "-" {
		return Disabled, nil
	}
	if loc == nil {
		loc = time.UTC
	}
	if strings.ContainsAny(expr, "LW#") && !strings.HasPrefix(expr, "@") {
		return nil, fmt.Errorf("%w: cron %q: L, W and # are not supported", ErrInvalidSchedule, expr)
	}
	if strings.HasPrefix(expr, "CRON_TZ=") || strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "@every") {
		return nil, fmt.Errorf("%w: cron %q: give the zone as loc; use FixedDelay for @every", ErrInvalidSchedule, expr)
	}
	s, err := cronParser.Parse(expr)
	if err != nil {
		return nil, fmt.Errorf("%w: cron %q: %w", ErrInvalidSchedule, expr, err)
	}
	return cronSchedule{expr: expr, loc: loc, s: s}, nil
}

type cronSchedule struct {
	expr string
	loc  *time.Location
	s    cron.Schedule
}

func (c cronSchedule) Initial(now time.Time) time.Time { return c.Next(now) }
func (c cronSchedule) Next(after time.Time) time.Time  { return c.s.Next(after.In(c.loc)) }

// String is the expression; cron schedules have no form of Parse (as in
// db-scheduler, whose Schedules.parse reads none).
func (c cronSchedule) String() string { return c.expr }

var (
	fixedDelayPattern = regexp.MustCompile(`^FIXED_DELAY\|(\d+)s$`)
	dailyPattern      = regexp.MustCompile(`^DAILY\|((\d{2}:\d{2})(,\d{2}:\d{2})*)(\|(.+))?$`)
)

// Parse reads a schedule as db-scheduler's Schedules.parse does:
// "FIXED_DELAY|<seconds>s", "DAILY|HH:MM[,HH:MM...][|Zone]" (zone UTC when
// omitted) and "-" (Disabled); and, which db-scheduler does not,
// "FIXED_DELAY|<Go duration>" such as "FIXED_DELAY|1m30s", the form String
// gives a delay with a fraction of a second. Anything else is an error
// wrapping ErrInvalidSchedule.
func Parse(s string) (Schedule, error) {
	if s == "-" {
		return Disabled, nil
	}
	if m := fixedDelayPattern.FindStringSubmatch(s); m != nil {
		n, err := strconv.ParseInt(m[1], 10, 64)
		if err != nil || n > int64(time.Duration(1<<63-1)/time.Second) {
			return nil, fmt.Errorf("%w: %q: delay out of range", ErrInvalidSchedule, s)
		}
		return FixedDelay(time.Duration(n) * time.Second)
	}
	if rest, ok := strings.CutPrefix(s, "FIXED_DELAY|"); ok && strings.TrimLeft(rest, "0123456789.") != "s" {
		// Beyond db-scheduler: a Go duration, as FixedDelay.String writes
		// a delay with a fraction of a second.
		d, err := time.ParseDuration(rest)
		if err != nil {
			return nil, fmt.Errorf("%w: %q: %w", ErrInvalidSchedule, s, err)
		}
		return FixedDelay(d)
	}
	if m := dailyPattern.FindStringSubmatch(s); m != nil {
		loc := time.UTC
		if m[5] != "" {
			var err error
			if loc, err = time.LoadLocation(m[5]); err != nil {
				return nil, fmt.Errorf("%w: %q: zone: %w", ErrInvalidSchedule, s, err)
			}
		}
		return Daily(loc, strings.Split(m[1], ",")...)
	}
	return nil, fmt.Errorf("%w: %q: want FIXED_DELAY|<n>s, DAILY|HH:MM[,HH:MM...][|Zone] or -", ErrInvalidSchedule, s)
}

// Must returns s, and panics if err is not nil; it is for schedules written
// in the program, as regexp.MustCompile is for patterns.
func Must(s Schedule, err error) Schedule {
	if err != nil {
		panic(err)
	}
	return s
}

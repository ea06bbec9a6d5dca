package scheduler

import (
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockreg/lockreg/internal/dialect"
	"github.com/lockreg/lockreg/jdbc"
)

var (
	// ErrInvalidConfig reports a Config field out of range. The returned
	// error wraps it and names the field.
	ErrInvalidConfig = errors.New("scheduler: invalid configuration")

	// ErrUnknownDialect reports a database whose driver is not recognised
	// when Config.Dialect is empty.
	ErrUnknownDialect = errors.New("scheduler: unknown dialect")

	// ErrNoTable reports that the table does not exist. The returned error
	// names it and says how to create it.
	ErrNoTable = errors.New("scheduler: table missing")
)

// DefaultTable is db-scheduler's default table name.
const DefaultTable = "scheduled_tasks"

// MaxIDLen is the longest task name and instance id, in characters:
// db-scheduler's VARCHAR(100) columns on MySQL/MariaDB and SQLite. It holds
// on every database so that a table can move between them.
const MaxIDLen = 100

// MaxNameLen is the longest scheduler name, db-scheduler's picked_by
// VARCHAR(50).
const MaxNameLen = 50

// Config configures a [Client], a [Scheduler] and [CreateSchema]. The zero
// value of every Optional field is its default, db-scheduler's where it has
// one.
type Config struct {
	// Table is the table's name, optionally qualified by a schema; it is
	// pasted into SQL, so it must be one or two identifiers of letters,
	// digits and _. Optional: default "scheduled_tasks", db-scheduler's,
	// with its columns (v16 layout, priority included).
	Table string

	// Dialect is the SQL dialect. Optional: detected from db's driver as
	// package jdbc does.
	Dialect jdbc.Dialect

	// TimeZone is the zone of the wall times in MySQL/MariaDB's DATETIME
	// columns. Optional: default UTC, what db-scheduler writes with
	// alwaysPersistTimestampInUTC(), which its README asks MySQL and
	// MariaDB users to enable; set it to the Java fleet's JVM zone
	// otherwise. It must be nil on PostgreSQL (timestamptz) and SQLite
	// (epoch milliseconds), whose times have no zone.
	TimeZone *time.Location

	// Tasks are the tasks this process knows. Required for a Scheduler,
	// which picks executions of these names only; Optional for a Client,
	// which then refuses to schedule any other name.
	Tasks []Task

	// Name is written to picked_by by this scheduler (db-scheduler's
	// schedulerName). Optional: by default the host name, a slash and 8
	// random hex digits, unique to this scheduler. At most 50 characters.
	Name string

	// Threads is how many executions run at once (db-scheduler's threads).
	// Optional: default 10.
	Threads int

	// FetchLimit is how many executions a scheduler holds picked at most,
	// running and waiting for a thread; it fetches again when fewer than
	// half of Threads are left (db-scheduler's lock-and-fetch limits,
	// upper 3.0 and lower 0.5). Optional: default 3 × Threads.
	FetchLimit int

	// PollInterval is the longest wait between fetches when nothing wakes
	// the scheduler (db-scheduler's pollingInterval). A scheduler also
	// wakes when it knows the next execution time, when this process
	// schedules one, and with a Listener when any process does. Each
	// wait is shortened by up to a tenth at random, so that schedulers
	// started together do not poll in step. Optional: default 10 s.
	PollInterval time.Duration

	// HeartbeatInterval is how often a scheduler writes last_heartbeat of
	// every execution it holds picked, and looks for dead ones.
	// Optional: default 5 min, db-scheduler's; with a Java fleet on the
	// table it must not be longer than the Java fleet's.
	HeartbeatInterval time.Duration

	// MissedHeartbeats is how many heartbeat intervals without a heartbeat
	// make a picked execution dead, judged by the database's clock.
	// Optional: default 6, db-scheduler's.
	MissedHeartbeats int

	// Priority makes inserts write priority and fetches order by priority
	// DESC, execution_time (db-scheduler's enablePriority()). Optional: off,
	// as in db-scheduler; executions run in execution_time order.
	Priority bool

	// DeleteUnresolvedAfter, when positive, makes a scheduler delete the
	// unpicked executions of task names it does not know whose
	// execution_time is older than this. Optional: by default they are
	// never deleted (db-scheduler deletes them after 14 days, which loses
	// the tasks of a node a rolling deploy has not reached yet).
	DeleteUnresolvedAfter time.Duration

	// Listener, on PostgreSQL, wakes a scheduler as soon as any process
	// schedules an execution that is due within PollInterval, or a
	// stopping scheduler hands its executions back (pgxlisten.New,
	// pqlisten.New). Optional: without it a scheduler wakes on its own
	// process's schedules and polls.
	Listener jdbc.Listener

	// NoNotify stops the client's NOTIFY at the commit of a schedule on
	// PostgreSQL. Optional: by default it notifies when the execution is
	// due within PollInterval, at the cost of PostgreSQL's notification
	// queue lock at each such commit.
	NoNotify bool

	// Logger receives the scheduler's logs. Optional: slog.Default().
	Logger *slog.Logger

	// MeterProvider and TracerProvider receive metrics and spans (see
	// docs/observability.md). Optional: none.
	MeterProvider  metric.MeterProvider
	TracerProvider trace.TracerProvider
}

var tablePattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$`)

// settled is a checked Config with its defaults set.
type settled struct {
	Config
	d     *dialect.Dialect
	loc   *time.Location
	tasks map[string]*Task
	names []any // the task names, as arguments of a {list}
}

func (c Config) settle(db *sql.DB, forScheduler bool) (*settled, error) {
	if db == nil {
		return nil, errors.New("scheduler: nil database")
	}
	s := &settled{Config: c, loc: c.TimeZone, tasks: make(map[string]*Task)}
	if s.Table == "" {
		s.Table = DefaultTable
	}
	if !tablePattern.MatchString(s.Table) || len(s.Table) > 128 {
		return nil, fmt.Errorf("%w: Table %s: must match %s", ErrInvalidConfig, dialect.Quote(s.Table), tablePattern)
	}
	if err := s.setDialect(db); err != nil {
		return nil, err
	}
	if s.TimeZone != nil && s.d.Name != "mysql" {
		return nil, fmt.Errorf("%w: TimeZone %s on %s: its times have no zone", ErrInvalidConfig, s.TimeZone, s.d.Name)
	}
	if s.loc == nil {
		s.loc = time.UTC
	}
	if s.Name == "" {
		s.Name = defaultName()
	}
	if n := utf8.RuneCountInString(s.Name); n > MaxNameLen || !utf8.ValidString(s.Name) {
		return nil, fmt.Errorf("%w: Name %s: must be valid UTF-8 of at most %d characters", ErrInvalidConfig, dialect.Quote(s.Name), MaxNameLen)
	}
	for _, f := range []struct {
		name string
		v    *int
		def  int
	}{{"Threads", &s.Threads, 10}, {"MissedHeartbeats", &s.MissedHeartbeats, 6}} {
		if *f.v < 0 {
			return nil, fmt.Errorf("%w: %s %d: must not be negative", ErrInvalidConfig, f.name, *f.v)
		}
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	if s.FetchLimit < 0 {
		return nil, fmt.Errorf("%w: FetchLimit %d: must not be negative", ErrInvalidConfig, s.FetchLimit)
	}
	if s.FetchLimit == 0 {
		s.FetchLimit = 3 * s.Threads
	}
	s.FetchLimit = max(s.FetchLimit, s.Threads)
	for _, f := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{{"PollInterval", &s.PollInterval, 10 * time.Second}, {"HeartbeatInterval", &s.HeartbeatInterval, 5 * time.Minute},
		{"DeleteUnresolvedAfter", &s.DeleteUnresolvedAfter, 0}} {
		if *f.v < 0 {
			return nil, fmt.Errorf("%w: %s %v: must not be negative", ErrInvalidConfig, f.name, *f.v)
		}
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	if s.Logger == nil {
		s.Logger = slog.Default()
	}
	for i := range s.Tasks {
		t := &s.Tasks[i]
		if t.run == nil && t.name == "" {
			return nil, fmt.Errorf("%w: Tasks[%d]: not made by OneTime, Recurring, RecurringStored or Custom", ErrInvalidConfig, i)
		}
		if err := t.check(); err != nil {
			return nil, fmt.Errorf("Config.Tasks[%d]: %w", i, err)
		}
		if _, dup := s.tasks[t.name]; dup {
			return nil, fmt.Errorf("%w: Tasks: two tasks named %s", ErrInvalidConfig, dialect.Quote(t.name))
		}
		s.tasks[t.name] = t
		s.names = append(s.names, t.name)
	}
	if forScheduler && len(s.Tasks) == 0 {
		return nil, fmt.Errorf("%w: Tasks: a scheduler needs at least one task", ErrInvalidConfig)
	}
	if s.Listener != nil && s.d.Name != "postgres" {
		return nil, fmt.Errorf("%w: Listener on %s: only PostgreSQL has LISTEN/NOTIFY", ErrInvalidConfig, s.d.Name)
	}
	return s, nil
}

func (s *settled) setDialect(db *sql.DB) error {
	if s.Dialect != "" {
		if s.d = dialect.Lookup(string(s.Dialect)); s.d == nil {
			return fmt.Errorf("%w: Dialect %q: must be %q, %q or %q", ErrInvalidConfig, s.Dialect, jdbc.Postgres, jdbc.MySQL, jdbc.SQLite)
		}
		return nil
	}
	drv := db.Driver()
	if drv != nil {
		s.d = dialect.Detect(drv)
	}
	if s.d == nil {
		return fmt.Errorf("%w: driver %T is not one jdbc recognises; set Config.Dialect", ErrUnknownDialect, drv)
	}
	return nil
}

// defaultName is the host name and a random suffix, within picked_by.
func defaultName() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	var b [4]byte
	rand.Read(b[:])
	if n := MaxNameLen - len("/00000000"); utf8.RuneCountInString(host) > n {
		host = string([]rune(host)[:n])
	}
	return host + "/" + hex.EncodeToString(b[:])
}

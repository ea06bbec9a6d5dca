package shedlock

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"regexp"
	"time"
	"unicode/utf8"

	"github.com/lockreg/lockreg/internal/dialect"
	"github.com/lockreg/lockreg/jdbc"
)

var (
	// ErrInvalidConfig reports a Config field out of range, or a task name
	// the table cannot hold. The returned error wraps it and names the field.
	ErrInvalidConfig = errors.New("shedlock: invalid configuration")

	// ErrUnknownDialect reports a database whose driver is not recognised
	// when Config.Dialect is empty.
	ErrUnknownDialect = errors.New("shedlock: unknown dialect")

	// ErrNoTable reports that the ShedLock table does not exist. The
	// returned error names it and says how to create it.
	ErrNoTable = errors.New("shedlock: table missing")
)

// DefaultTable is ShedLock's default table name.
const DefaultTable = "shedlock"

// MaxNameLen is the longest task name, in characters, that ShedLock's
// table holds (name VARCHAR(64)).
const MaxNameLen = 64

// Config configures a [Repository] and [CreateSchema].
type Config struct {
	// Table is the table's name, optionally qualified by a schema
	// ("locks.shedlock"); it is pasted into SQL, so it must be one or two
	// identifiers of letters, digits and _. Optional: default "shedlock",
	// ShedLock's. The columns are ShedLock's defaults: name, lock_until,
	// locked_at, locked_by.
	Table string

	// UseDBTime makes every time the database's, as ShedLock's
	// usingDbTime() does: UTC wall time read by the statements. Optional:
	// by default times are the application's clock, bound as parameters,
	// as ShedLock does by default. Every client of a table must agree on
	// the wall-time convention: database time writes UTC, so Java clients
	// in application-time mode must then use forceUtcTimeZone() or run in
	// UTC.
	UseDBTime bool

	// TimeZone is the zone of the wall times written in application-time
	// mode: set it to the Java clients' JVM default zone
	// (TimeZone.getDefault()) unless they use forceUtcTimeZone(). Optional:
	// default UTC. It must be nil with UseDBTime.
	TimeZone *time.Location

	// LockedBy is written to locked_by, the only ownership ShedLock checks
	// when it unlocks or extends. Optional: by default the host name, a
	// slash and 8 random hex digits ("web-1/lockreg-3f9a0c2e"), unique to
	// this repository, so that no other process, Go or Java, on the same
	// host can unlock its locks. At most 255 characters.
	LockedBy string

	// Dialect is the SQL dialect. Optional: detected from db's driver as
	// package jdbc does (see [jdbc.WithDialect]).
	Dialect jdbc.Dialect
}

var tablePattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$`)

// settled is a checked Config.
type settled struct {
	Config
	d   *dialect.Dialect
	loc *time.Location
}

func (c Config) settle(db jdbc.DB) (*settled, error) {
	if dialect.IsNil(db) {
		return nil, errors.New("shedlock: nil database")
	}
	s := &settled{Config: c, loc: c.TimeZone}
	if s.Table == "" {
		s.Table = DefaultTable
	}
	if !tablePattern.MatchString(s.Table) || len(s.Table) > 128 {
		return nil, fmt.Errorf("%w: Table %s: must match %s", ErrInvalidConfig, dialect.Quote(s.Table), tablePattern)
	}
	if s.UseDBTime && s.TimeZone != nil {
		return nil, fmt.Errorf("%w: TimeZone %s with UseDBTime: database time is UTC (ShedLock refuses forceUtcTimeZone with usingDbTime too)",
			ErrInvalidConfig, s.TimeZone)
	}
	if s.loc == nil {
		s.loc = time.UTC
	}
	if s.LockedBy == "" {
		s.LockedBy = defaultLockedBy()
	}
	if n := utf8.RuneCountInString(s.LockedBy); n > 255 || !utf8.ValidString(s.LockedBy) {
		return nil, fmt.Errorf("%w: LockedBy %s: must be valid UTF-8 of at most 255 characters", ErrInvalidConfig, dialect.Quote(s.LockedBy))
	}
	if s.Dialect == "" {
		drv := db.Driver()
		if drv != nil {
			s.d = dialect.Detect(drv)
		}
		if s.d == nil {
			return nil, fmt.Errorf("%w: driver %T is not one jdbc recognises; set Config.Dialect", ErrUnknownDialect, drv)
		}
	} else if s.d = dialect.Lookup(string(s.Dialect)); s.d == nil {
		return nil, fmt.Errorf("%w: Dialect %q: must be %q, %q or %q", ErrInvalidConfig, s.Dialect, jdbc.Postgres, jdbc.MySQL, jdbc.SQLite)
	}
	return s, nil
}

// defaultLockedBy is the host name and a random suffix.
func defaultLockedBy() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	var b [4]byte
	rand.Read(b[:])
	if n := 255 - len("/lockreg-00000000"); utf8.RuneCountInString(host) > n {
		host = string([]rune(host)[:n])
	}
	return host + "/lockreg-" + hex.EncodeToString(b[:])
}

// checkName returns an error wrapping ErrInvalidConfig for a task name the
// table cannot hold.
func checkName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty task name", ErrInvalidConfig)
	case !utf8.ValidString(name):
		return fmt.Errorf("%w: task name %s is not valid UTF-8", ErrInvalidConfig, dialect.Quote(name))
	case utf8.RuneCountInString(name) > MaxNameLen:
		return fmt.Errorf("%w: task name %s is longer than %d characters, which ShedLock's name column holds",
			ErrInvalidConfig, dialect.Quote(name), MaxNameLen)
	}
	for _, r := range name {
		if r == 0 {
			return fmt.Errorf("%w: task name %s contains NUL", ErrInvalidConfig, dialect.Quote(name))
		}
	}
	return nil
}

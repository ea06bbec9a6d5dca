package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/lockreg/lockreg/internal/dialect"
	tel "github.com/lockreg/lockreg/internal/telemetry"
	"github.com/lockreg/lockreg/jdbc"
)

var (
	// ErrInvalidConfig reports an invalid Config; the returned error wraps
	// it and names the field.
	ErrInvalidConfig = errors.New("sqlstore: invalid config")

	// ErrNoTable reports that the group tables do not exist. The returned
	// error wraps it, names the tables and says how to create them.
	ErrNoTable = errors.New("sqlstore: group tables missing")
)

// DB is the database a Store uses: a [jdbc.DB] that can also begin
// transactions. *sql.DB and *sqlx.DB satisfy it.
type DB interface {
	jdbc.DB
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}

// Defaults of Config. A completed group is kept a week, Kafka's default
// log retention: as long as a broker typically keeps a message it could
// redeliver.
const (
	defaultPrefix           = "INT_"
	defaultRegion           = "DEFAULT"
	defaultCleanupRetention = 7 * 24 * time.Hour
	defaultCleanupInterval  = time.Hour
	defaultGroupCommit      = 1 // where the pool's bound is unknown
)

// Config configures New and CreateSchema. The zero Config is valid: every
// field is optional.
type Config struct {
	// Dialect is the SQL dialect. Optional: by default it is detected from
	// the database's driver, as jdbc.WithDialect describes.
	Dialect jdbc.Dialect

	// Prefix is the prefix of the table names: the groups are in Prefix +
	// "GROUP" and Prefix + "GROUP_MESSAGE", and the clean-up's lease in
	// the lock table Prefix + "LOCK". Optional, default "INT_". It is
	// pasted into SQL, so it must match ^[A-Za-z_][A-Za-z0-9_]*$ and be at
	// most 40 bytes long.
	Prefix string

	// Region partitions the tables: stores in different regions never see
	// each other's groups. Optional, default "DEFAULT"; at most 100 bytes
	// of UTF-8 without NUL.
	Region string

	// CleanupRetention and CleanupInterval set the background clean-up:
	// every CleanupInterval, one store of the tables and region deletes
	// the groups that are finished, with the rows that remember their
	// messages' UUIDs. A group is finished when it is complete, holds no
	// unreleased message, has no due time (no pending timeout, no
	// scheduled removal) and has not changed for CleanupRetention, by the
	// database's clock; open groups and groups with a due time are never
	// deleted, however old. Optional, defaults 7 days and 1 h; they must
	// not be negative.
	//
	// Retention is the window in which a redelivered message of a
	// completed group is still recognised (groupstore.Duplicate) and a
	// late one rejected (groupstore.Rejected): after it, the message
	// starts a new group with the same key, so an aggregator would release
	// it again. Set it longer than the longest time after which your
	// broker may redeliver a message (its retention, ack deadlines, the
	// longest outage you plan for); the cost is the kept groups, a row per
	// group and one per message, without payloads.
	//
	// A pass is coordinated through the lease on the LOCK_KEY
	// jdbc.UUIDKey("lockreg cleanup " + Prefix + "GROUP") in the lock
	// table (which CreateSchema creates with the group tables), in the
	// store's region, taken for the interval plus 2 s as jdbc.WithCleanup
	// describes. It deletes at most 1000 rows per statement: the message
	// rows of finished groups first, then the finished groups without
	// message rows. Each statement finds finished groups by scanning the
	// region's groups without a due time. The first pass runs one interval
	// after the store's first Add; Close stops it. A group whose message
	// rows a pass has begun to delete may reject a redelivery as late
	// before the group itself is deleted.
	CleanupRetention, CleanupInterval time.Duration

	// GroupCommit is the number of Add statements of the store in flight
	// at once on PostgreSQL, where an Add outside Locked is one statement.
	// An Add that arrives while that many are in flight waits for one of
	// them to end and then runs with the others that waited, up to 32
	// messages of distinct groups, in one statement (a group commit): one
	// round trip, one commit and one flush of the log for all of them. Each
	// Add still returns once its message is durable, with its own outcome,
	// and the group's lock and checks are those of an Add alone; an error
	// of the shared statement runs each Add again on its own. An Add that
	// finds a statement free runs at once, so a quiet store adds no wait;
	// under load an Add may wait for one statement ahead of it. Optional:
	// 0 means as many as the database's pool may open connections
	// (sql.DBStats.MaxOpenConnections when New is called, for a DB with a
	// Stats method such as *sql.DB), or 1 where the pool is unbounded or
	// its bound unknown: Adds then wait to share a statement only when
	// every connection is busy, where they would otherwise wait for a
	// connection. 1 makes every Add wait while one statement is in flight,
	// which sends the fewest commits but makes an Add wait for about two
	// statements under load: with 4 handler workers on a pool of 4 per
	// store, 4 stores, the benchmark handled 1.1-2.0 times the messages
	// with every Add in flight at once that it handled with 1 (two runs of
	// 3 interleaved rounds, docs/benchmarks.md). An Add waits, without a
	// connection, while a Locked call of the same store holds its group,
	// so that Adds in flight cannot take the connections that call may
	// still need. A negative value turns it off (every Add is a statement
	// of its own).
	// MySQL and SQLite, whose Add is a transaction of several statements,
	// ignore it.
	GroupCommit int

	// DisableCleanup turns the background clean-up off: the store starts
	// no goroutine, and the tables keep every group until deleted
	// otherwise (Store.DeleteCompleted, Remove, or SQL). Optional.
	DisableCleanup bool

	// OnError receives the errors of the background clean-up, one call per
	// failed pass, which is tried again at its next interval. Optional:
	// by default they are logged to Logger.
	OnError func(error)

	// Logger logs the clean-up's errors when OnError is nil, with the
	// fields region and backend, at most once per 10 s while they repeat
	// (with a count of the ones held back). Optional: slog.Default() as it
	// is when they occur.
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	if c.Prefix == "" {
		c.Prefix = defaultPrefix
	}
	if c.Region == "" {
		c.Region = defaultRegion
	}
	if c.CleanupRetention == 0 {
		c.CleanupRetention = defaultCleanupRetention
	}
	if c.CleanupInterval == 0 {
		c.CleanupInterval = defaultCleanupInterval
	}
}

// groupCommit returns the Add statements in flight at once of a store on
// db configured with n (Config.GroupCommit): n, or for 0 the bound of
// db's pool, else defaultGroupCommit.
func groupCommit(db DB, n int) int {
	if n != 0 {
		return n
	}
	if st, ok := db.(interface{ Stats() sql.DBStats }); ok {
		if max := st.Stats().MaxOpenConnections; max > 0 {
			return max
		}
	}
	return defaultGroupCommit
}

// reporter returns the function that receives the clean-up's errors on
// the backend of dialect d: OnError, or the rate-limited Logger.
func (c Config) reporter(d *dialect.Dialect) func(error) {
	if c.OnError != nil {
		return c.OnError
	}
	log := tel.NewLogger(c.Logger, tel.LogRegion, c.Region, tel.LogBackend, d.System)
	return func(err error) { log.Repeated("cleanup", "lockreg: sqlstore", err) }
}

// validate checks c after setDefaults and returns the dialect of db.
func (c Config) validate(db jdbc.DB) (*dialect.Dialect, error) {
	if why := dialect.CheckPrefix(c.Prefix); why != "" {
		return nil, fmt.Errorf("%w: Prefix %q: %s", ErrInvalidConfig, c.Prefix, why)
	}
	if why := dialect.CheckText(c.Region, dialect.MaxRegionLen); why != "" {
		return nil, fmt.Errorf("%w: Region %q: a region %s", ErrInvalidConfig, c.Region, why)
	}
	if c.CleanupRetention < 0 || c.CleanupInterval < 0 {
		return nil, fmt.Errorf("%w: CleanupRetention %v, CleanupInterval %v: must not be negative",
			ErrInvalidConfig, c.CleanupRetention, c.CleanupInterval)
	}
	if c.Dialect != "" {
		if d := dialect.Lookup(string(c.Dialect)); d != nil {
			return d, nil
		}
		return nil, fmt.Errorf("%w: Dialect %q: must be %q, %q or %q", ErrInvalidConfig, c.Dialect,
			jdbc.Postgres, jdbc.MySQL, jdbc.SQLite)
	}
	if drv := db.Driver(); drv != nil {
		if d := dialect.Detect(drv); d != nil {
			return d, nil
		}
	}
	return nil, fmt.Errorf("%w: driver %T is not one sqlstore recognises; set Config.Dialect", jdbc.ErrUnknownDialect, db.Driver())
}

// lockOptions are the options of the lock table's jdbc functions for c.
func (c Config) lockOptions(d *dialect.Dialect) []jdbc.Option {
	return []jdbc.Option{jdbc.WithPrefix(c.Prefix), jdbc.WithRegion(c.Region), jdbc.WithDialect(jdbc.Dialect(d.Name))}
}

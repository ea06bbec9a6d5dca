package jdbc

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/metric"

	"github.com/lockreg/lockreg/internal/dialect"
	tel "github.com/lockreg/lockreg/internal/telemetry"
)

// Dialect names the SQL dialect a [LockRepository] speaks. Its value is also
// the folder of the dialect's scripts in package
// [github.com/lockreg/lockreg/sql].
type Dialect string

// The supported dialects.
const (
	Postgres Dialect = "postgres" // PostgreSQL 9.5 or later (ON CONFLICT)
	MySQL    Dialect = "mysql"    // MySQL 5.7+/8 and MariaDB 10.3+, InnoDB
	SQLite   Dialect = "sqlite"   // SQLite 3.24 or later (upsert)
)

// Defaults of the options, Spring Integration's.
const (
	defaultPrefix = "INT_"
	defaultRegion = "DEFAULT"

	defaultQueueTTL = time.Second
	// defaultGroupCommit is WithGroupCommit's default.
	defaultGroupCommit = 1
)

// An Option configures NewLockRepository and CreateSchema. Options are
// checked when applied by those functions, which then return an error
// wrapping ErrInvalidOption for a bad value.
type Option func(*options)

type options struct {
	prefix     string
	region     string
	clientID   string
	dialect    Dialect
	keyMapping func(string) string
	keySet     bool
	clientSet  bool
	queries    [3]string // acquire, renew, release; "" means default
	querySet   [3]bool
	listener   Listener
	queueTTL   time.Duration
	onError    func(error)
	logger     *slog.Logger
	meters     metric.MeterProvider
	noPrepare  bool
	// groupCommit is how many take and expire statements run at once
	// before others wait and run together (WithGroupCommit); 0 after
	// newConfig means none are grouped.
	groupCommit int
	appName     string
	appSet      bool
	cleanup     cleanupSpec // see cleanup.go

	layout        Layout // see layout.go
	spring6TTL    time.Duration
	spring6TTLSet bool
}

const (
	qAcquire = iota
	qRenew
	qRelease
)

var queryOptionNames = [3]string{"WithAcquireQuery", "WithRenewQuery", "WithReleaseQuery"}

// WithPrefix sets the prefix of the table name: the lock table is prefix +
// "LOCK". The default is "INT_", Spring Integration's. The prefix is pasted
// into SQL, so it must match ^[A-Za-z_][A-Za-z0-9_]*$ and be at most 40 bytes
// long; anything else makes NewLockRepository and CreateSchema fail with
// ErrInvalidOption. On PostgreSQL, unquoted names fold to lower case.
func WithPrefix(p string) Option { return func(o *options) { o.prefix = p } }

// WithRegion sets the region, which partitions the lock table: repositories
// in different regions never see each other's rows. The default is
// "DEFAULT", Spring Integration's. A region must be non-empty valid UTF-8
// without NUL bytes and at most 100 bytes long. It is bound as a query
// parameter, so it may contain any other character.
func WithRegion(r string) Option { return func(o *options) { o.region = r } }

// WithListener makes a PostgreSQL repository hear released locks through
// LISTEN/NOTIFY and queue for them: its waiters are served in arrival
// order, and a release hands the lease straight to the first of them and
// wakes it, so hand-off takes about one commit instead of up to an idle
// interval. The release statement sends the notification itself, so
// announcing costs no extra round trip; receiving costs one connection per
// repository, opened when the first registry waits and held until Close,
// and re-opened after failures, with jittered exponential backoff from
// 100 ms to 30 s; each failure is reported once to the error handler
// (WithErrorHandler), and meanwhile waiters poll. Package pgxlisten provides
// a Listener for pgx users, package pqlisten one for lib/pq users;
// NewLockRepository refuses, with ErrInvalidOption, one of theirs that
// cannot work with the database (pgxlisten on a lib/pq database, say).
// Other dialects reject this option: their waiters poll.
func WithListener(l Listener) Option { return func(o *options) { o.listener = l } }

// WithQueueTTL sets how long a waiter keeps its place in a key's queue
// after its last attempt (default 1 s). PostgreSQL repositories serve
// waiters in the order they began to wait; a waiter that polls less often
// than this loses its place, and a waiter that vanished without leaving
// holds up the others for at most this long. Make it a few times the
// registry's idle interval. It must be positive.
func WithQueueTTL(d time.Duration) Option { return func(o *options) { o.queueTTL = d } }

// WithErrorHandler sets the function that receives errors of the
// background work of a repository, one call for each
// failure: the notification listener's, after which it reconnects with
// backoff (see WithListener), and the clean-up's (see WithCleanup), which
// retries at its next interval. The default logs them to the logger of
// WithLogger.
func WithErrorHandler(f func(error)) Option { return func(o *options) { o.onError = f } }

// WithClientID sets the client id, the identity that owns the rows this
// repository writes. The default is a random UUID, so every repository is a
// client of its own. A client id must be non-empty valid UTF-8 without NUL
// bytes and at most 36 bytes long. Two live repositories must never share a
// client id, or both would hold the same lock.
func WithClientID(id string) Option {
	return func(o *options) { o.clientID, o.clientSet = id, true }
}

// WithDialect sets the SQL dialect. By default it is detected from the
// package of the database's driver: github.com/jackc/pgx (stdlib) and
// github.com/lib/pq are Postgres, github.com/go-sql-driver/mysql is MySQL,
// modernc.org/sqlite and github.com/mattn/go-sqlite3 are SQLite. Use it when
// the driver is wrapped (for tracing, say) or otherwise unknown.
func WithDialect(d Dialect) Option { return func(o *options) { o.dialect = d } }

// WithKeyMapping sets the function that maps a caller's key to the LOCK_KEY
// column, which holds at most 36 characters. The default is UUIDKey, as in
// Spring Integration (JdbcLockRegistry.pathFor). The function must be
// deterministic and safe for concurrent use, and return non-empty valid UTF-8
// without NUL bytes of at most 36 bytes; Acquire, Renew and Release fail with
// ErrInvalidOption otherwise. Keys whose results are equal are one lock.
func WithKeyMapping(f func(key string) string) Option {
	return func(o *options) { o.keyMapping, o.keySet = f, true }
}

// WithAcquireQuery replaces the statement Acquire executes (Spring
// Integration 6.1's setInsertQuery/setUpdateQuery, as one statement). See
// the package documentation for the parameters a custom query may use. The
// lock counts as acquired iff the statement affects exactly one row, or two
// on MySQL (an ON DUPLICATE KEY UPDATE that changed the row). It must be a
// single statement that takes the lock atomically. On MySQL, whose
// clientFoundRows=true counts a row left unchanged as affected,
// NewLockRepository refuses it on such connections with ErrClientFoundRows.
func WithAcquireQuery(q string) Option {
	return func(o *options) { o.queries[qAcquire], o.querySet[qAcquire] = q, true }
}

// WithRenewQuery replaces the statement Renew executes (Spring Integration
// 6.1's setRenewQuery). See the package documentation for the parameters. A
// statement that affects no row makes Renew fail with registry.ErrLockLost.
func WithRenewQuery(q string) Option {
	return func(o *options) { o.queries[qRenew], o.querySet[qRenew] = q, true }
}

// WithReleaseQuery replaces the statement Release executes (Close keeps
// using the default, which expires only this client's rows in place). See
// the package documentation for the parameters. A statement that affects no row makes
// Release fail with registry.ErrLockLost.
func WithReleaseQuery(q string) Option {
	return func(o *options) { o.queries[qRelease], o.querySet[qRelease] = q, true }
}

// WithoutPreparedStatements makes the repository send every statement as
// it is, with its arguments, instead of preparing it once per connection of
// db's pool. Use it when db reaches PostgreSQL through a pooler in
// transaction mode, such as PgBouncer with pool_mode = transaction, which
// runs each transaction on whichever server connection is free: a statement
// prepared on one connection is missing on the next (SQLSTATE 26000), or
// another client's statement of the same name runs in its place. The driver
// must not prepare statements behind lockreg's back either: with pgx, put
// default_query_exec_mode=exec in the DSN; with lib/pq,
// binary_parameters=yes. Each statement then still takes one round trip.
//
// On a *sql.DB with pgx the repository sends its acquire and release
// statements by their text with or without this option, on the driver
// connection, so pgx's default_query_exec_mode alone decides whether they
// are prepared (pgx's default caches them per connection).
func WithoutPreparedStatements() Option { return func(o *options) { o.noPrepare = true } }

// WithGroupCommit sets how many statements that take a lease, and how many
// that release one, the repository runs at once on PostgreSQL: those that
// arrive while n are in flight wait, and then run together, up to 32 keys
// in one statement, one round trip and one commit (one flush of the log)
// for all of them, a group commit. A call that finds fewer than n in
// flight runs at once, so that a quiet repository adds no latency, and
// a waiting call whose context ends leaves without having run. Grouped
// are the statements that take a row the repository took before and
// found no other client holding lately, and those that release a lease
// nobody waits for (see the package doc); a group's statement waits for
// no row lock, and a key it leaves runs its own statements. The default
// is 1; n = 0 keeps the default; a negative n sends one statement per key.
// MySQL and SQLite send one statement per key.
func WithGroupCommit(n int) Option { return func(o *options) { o.groupCommit = n } }

// WithApplicationName sets the application name in the description of this
// client that each acquisition writes to the lock table's HOLDER column,
// "host=<host name> pid=<process id> app=<name>", so that whoever reads the
// table (or the admin API, or the lockreg command) sees who holds a lock.
// The default name is that of the program's executable. The name must be
// valid UTF-8 without NUL bytes and at most 100 bytes long; "" leaves the
// app part out. The description costs no round trip: it is one more
// argument of the acquire statement.
func WithApplicationName(name string) Option {
	return func(o *options) { o.appName, o.appSet = name, true }
}

// config is the checked result of applying options to a database.
type config struct {
	options
	d      *dialect.Dialect
	log    *tel.Logger // background errors without an error handler
	tel    *repoTel    // nil without WithMeterProvider
	table  string      // prefix + "LOCK"
	holder string      // the HOLDER description
	// channel is the PostgreSQL notification channel of the table and
	// region: a hash, as channel names are at most 63 bytes long.
	channel string
}

func invalid(option, value, why string) error {
	return fmt.Errorf("%w: %s(%s): %s", ErrInvalidOption, option, dialect.Quote(value), why)
}

// newConfig applies and checks opts and settles the dialect of db. It does
// no I/O.
func newConfig(db DB, opts []Option) (c *config, err error) {
	if dialect.IsNil(db) {
		return nil, errors.New("jdbc: nil database")
	}
	c = &config{options: options{prefix: defaultPrefix, region: defaultRegion}}
	for _, opt := range opts {
		if opt != nil {
			opt(&c.options)
		}
	}
	if why := dialect.CheckPrefix(c.prefix); why != "" {
		return nil, invalid("WithPrefix", c.prefix, why)
	}
	if err := dialect.CheckText(c.region, dialect.MaxRegionLen); err != "" {
		return nil, invalid("WithRegion", c.region, "a region "+err)
	}
	if !c.clientSet {
		c.clientID = uuid.NewString()
	}
	if err := dialect.CheckText(c.clientID, dialect.MaxClientIDLen); err != "" {
		return nil, invalid("WithClientID", c.clientID, "a client id "+err)
	}
	if c.appSet && c.appName != "" {
		if err := dialect.CheckText(c.appName, maxAppNameLen); err != "" {
			return nil, invalid("WithApplicationName", c.appName, "an application name "+err)
		}
	}
	c.holder = holderDescription(c.appName, c.appSet)
	if c.keySet && c.keyMapping == nil {
		return nil, fmt.Errorf("%w: WithKeyMapping(nil): the key mapping must not be nil", ErrInvalidOption)
	}
	if c.keyMapping == nil {
		c.keyMapping = UUIDKey
	}
	for i, set := range c.querySet {
		if set && strings.TrimSpace(c.queries[i]) == "" {
			return nil, invalid(queryOptionNames[i], c.queries[i], "the query must not be empty")
		}
	}
	if c.dialect == "" {
		if c.d, err = detectDialect(db); err != nil {
			return nil, err
		}
		c.dialect = Dialect(c.d.Name)
	} else if c.d = dialect.Lookup(string(c.dialect)); c.d == nil {
		return nil, invalid("WithDialect", string(c.dialect),
			fmt.Sprintf("the dialect must be %q, %q or %q", Postgres, MySQL, SQLite))
	}
	if c.listener != nil && c.d.Lock.Queue == nil {
		return nil, fmt.Errorf("%w: WithListener: notifications need PostgreSQL, not %s", ErrInvalidOption, c.dialect)
	}
	if c.queueTTL == 0 {
		c.queueTTL = defaultQueueTTL
	}
	if c.queueTTL < 0 {
		return nil, fmt.Errorf("%w: WithQueueTTL(%v): must be positive", ErrInvalidOption, c.queueTTL)
	}
	switch {
	case c.groupCommit == 0:
		c.groupCommit = defaultGroupCommit
	case c.groupCommit < 0:
		c.groupCommit = 0
	}
	if err := c.settleCleanup(); err != nil {
		return nil, err
	}
	if err := c.settleLayout(); err != nil {
		return nil, err
	}
	if err := c.newTelemetry(); err != nil {
		return nil, fmt.Errorf("%w: WithMeterProvider: %w", ErrInvalidOption, err)
	}
	c.table = c.prefix + "LOCK"
	sum := sha256.Sum256([]byte(c.prefix + "\x00" + c.region))
	c.channel = "lockreg_" + hex.EncodeToString(sum[:12])
	return c, nil
}

// detectDialect tells the dialect from the package of db's driver.
func detectDialect(db DB) (*dialect.Dialect, error) {
	drv := db.Driver()
	if drv == nil {
		return nil, fmt.Errorf("%w: the database has no driver; use jdbc.WithDialect", ErrUnknownDialect)
	}
	if d := dialect.Detect(drv); d != nil {
		return d, nil
	}
	return nil, fmt.Errorf("%w: driver %T is not one jdbc recognises; use jdbc.WithDialect", ErrUnknownDialect, drv)
}

// refuseFoundRows fails with an error wrapping ErrClientFoundRows when db's
// connections count found rather than changed rows (go-sql-driver/mysql's
// clientFoundRows=true), as foundRows tells from a driver connection. It
// borrows one connection of the pool; a driver foundRows does not
// recognise (a wrapped one, say) passes.
func refuseFoundRows(ctx context.Context, db DB, foundRows func(dc any) bool) error {
	found := false
	check := func(dc any) error { found = foundRows(dc); return nil }
	var err error
	switch d := db.(type) {
	case interface{ Raw(func(any) error) error }: // *sql.Conn
		err = d.Raw(check)
	case interface {
		Conn(context.Context) (*sql.Conn, error)
	}: // *sql.DB, *sqlx.DB
		var c *sql.Conn
		if c, err = d.Conn(ctx); err == nil {
			err = c.Raw(check)
			c.Close()
		}
	}
	if err != nil {
		return fmt.Errorf("jdbc: reading the MySQL connection's settings: %w", err)
	}
	if found {
		return fmt.Errorf("%w: the database's DSN sets clientFoundRows=true, with which a custom acquire query "+
			"(WithAcquireQuery) reports a row left unchanged, a lock held elsewhere, as affected, that is, as "+
			"acquired; remove clientFoundRows=true from the DSN (the default statements do not need it)", ErrClientFoundRows)
	}
	return nil
}

// maxAppNameLen bounds WithApplicationName, leaving room in HOLDER for the
// host and process.
const maxAppNameLen = 100

// holderDescription returns the HOLDER value of this process:
// "host=<host> pid=<pid> app=<name>", the name being the executable's
// unless set, cut to the column's length.
func holderDescription(app string, set bool) string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	if !set {
		app = filepath.Base(os.Args[0])
	}
	d := "host=" + host + " pid=" + strconv.Itoa(os.Getpid())
	if app != "" {
		d += " app=" + app
	}
	return dialect.Readable(d)
}

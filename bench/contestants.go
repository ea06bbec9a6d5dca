package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/lockreg/lockreg/jdbc"
	"github.com/lockreg/lockreg/jdbc/pgxlisten"
	"github.com/lockreg/lockreg/jdbc/pqlisten"
	"github.com/lockreg/lockreg/registry"
)

// Table prefixes and names of the benchmark, distinct from the tests' INT_LOCK.
const (
	lockregPrefix = "BENCH_LR_"
	springPrefix  = "BENCH_SPRING_"
	shedlockTable = "bench_shedlock"
	pglockTable   = "bench_pglock"

	// Protocol constants shared by the peers, as the reference sets them.
	peerTTL  = 10 * time.Second       // Spring's default TTL, ShedLock's lockAtMostFor
	peerIdle = 100 * time.Millisecond // Spring's idleBetweenTries, ShedLock's poll
)

// A contestant is one lock implementation under test.
type contestant struct {
	name   string
	server string // "postgres", "mariadb" or "sqlite"
	isLock bool   // false for the floors but floor-handoff: they exclude nothing
	// only, when set, names the only scenario the contestant runs in.
	only    string
	lockreg bool // a lockreg registry: takes part in the cache scenario
	counted bool // statements are counted on the client (pgx tracer)
	open    func(ctx context.Context, e *env, pool int) (instance, error)
}

// An instance is one "process": its own pool and client id.
type instance interface {
	locker(ctx context.Context, key string) (locker, error)
	// stmts returns the statements sent so far (client-side count), or -1.
	stmts() int64
	close() error
}

// A locker locks and unlocks one key of an instance.
type locker interface {
	lock(ctx context.Context) error
	unlock(ctx context.Context) error
}

var contestants = []contestant{
	{name: "lockreg-pgx", server: "postgres", isLock: true, lockreg: true, counted: true, open: openLockreg("pgx", false)},
	{name: "lockreg-pq", server: "postgres", isLock: true, lockreg: true, open: openLockreg("postgres", false)},
	// The same with jdbc.WithListener: waiters are woken by NOTIFY.
	{name: "lockreg-pgx-listen", server: "postgres", isLock: true, counted: true, open: openLockreg("pgx", true)},
	{name: "lockreg-pq-listen", server: "postgres", isLock: true, open: openLockreg("postgres", true)},
	{name: "lockreg-mariadb", server: "mariadb", isLock: true, lockreg: true, open: openLockreg("mysql", false)},
	{name: "lockreg-sqlite", server: "sqlite", isLock: true, lockreg: true, open: openLockreg("sqlite", false)},
	{name: "spring-serializable", server: "postgres", isLock: true, counted: true, open: openSpring(sql.LevelSerializable)},
	{name: "spring-rc", server: "postgres", isLock: true, counted: true, open: openSpring(sql.LevelReadCommitted)},
	{name: "shedlock", server: "postgres", isLock: true, counted: true, open: openShedlock},
	{name: "pglock", server: "postgres", isLock: true, counted: true, open: openPglock},
	{name: "advisory", server: "postgres", isLock: true, counted: true, open: openSession("advisory")},
	{name: "floor", server: "postgres", counted: true, open: openSession("floor")},
	// The durable floors (floorlocks.go): a cycle as two single-row UPDATE
	// transactions; a hand-off as one UPDATE and NOTIFY to the next member.
	{name: "floor-durable", server: "postgres", counted: true, open: openFloor("postgres", false)},
	{name: "mariadb-floor-durable", server: "mariadb", counted: true, open: openFloor("mariadb", false)},
	{name: "sqlite-floor-durable", server: "sqlite", counted: true, open: openFloor("sqlite", false)},
	{name: "floor-handoff", server: "postgres", isLock: true, counted: true, only: "contended", open: openFloor("postgres", true)},
}

// counter is a pgx tracer that counts the statements sent (BEGIN and COMMIT
// included; a prepared statement's execution counts once) and, of them, the
// commits: each COMMIT and each statement sent outside a transaction (which
// commits on its own). countingDriver feeds one for other drivers.
type counter struct{ n, commits atomic.Int64 }

func (c *counter) TraceQueryStart(ctx context.Context, conn *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	c.statement(conn.PgConn().TxStatus() != 'I', d.SQL)
	return ctx
}

// statement counts a statement sent with sql, in a transaction or not. It
// looks at the first word only: lowering the whole text cost the
// contestants with longer statements a few µs per call (6 % of lockreg's
// client CPU in a profile), a cost of the benchmark, not theirs.
func (c *counter) statement(inTx bool, sql string) {
	c.n.Add(1)
	word := strings.TrimLeft(sql, " \t\r\n")
	if i := strings.IndexAny(word, " \t\r\n;"); i >= 0 {
		word = word[:i]
	}
	is := func(w string) bool { return strings.EqualFold(word, w) }
	switch {
	case is("commit"), !inTx && !is("begin") && !is("rollback"):
		c.commits.Add(1)
	}
}
func (c *counter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// openPgx opens a pgx stdlib pool whose statements are counted.
func openPgx(dsn string, pool int) (*sql.DB, *counter, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, nil, err
	}
	c := new(counter)
	cfg.Tracer = c
	db := stdlib.OpenDB(*cfg)
	sizePool(db, pool)
	return db, c, nil
}

// sizePool sets MaxOpen = MaxIdle, as the reference does: database/sql's
// default of 2 idle connections would churn connections.
func sizePool(db *sql.DB, pool int) {
	db.SetMaxOpenConns(pool)
	db.SetMaxIdleConns(pool)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
}

func openDB(e *env, driver string, pool int) (*sql.DB, *counter, error) {
	switch driver {
	case "pgx":
		return openPgx(e.pgDSN, pool)
	case "postgres":
		db, err := sql.Open("postgres", e.pgDSN)
		if err == nil {
			sizePool(db, pool)
		}
		return db, nil, err
	case "mysql":
		db, err := sql.Open("mysql", e.myDSN)
		if err == nil {
			sizePool(db, pool)
		}
		return db, nil, err
	case "sqlite":
		db, err := sql.Open("sqlite", e.sqliteDSN)
		if err == nil {
			sizePool(db, pool)
		}
		return db, nil, err
	}
	return nil, nil, fmt.Errorf("unknown driver %q", driver)
}

func count(c *counter) int64 {
	if c == nil {
		return -1
	}
	return c.n.Load()
}

// ---- lockreg ----

type lockregInst struct {
	db  *sql.DB
	c   *counter
	reg *registry.Registry
}

// openLockreg opens registry.New(jdbc.NewLockRepository(ctx, db)) with the
// defaults (but the table prefix and region), and with listen also
// jdbc.WithListener (pgxlisten or pqlisten).
func openLockreg(driver string, listen bool) func(context.Context, *env, int) (instance, error) {
	return openLockregWith(driver, listen, nil, nil)
}

// openLockregWith is openLockreg with more options for the registry and
// the repository (the otel scenario's providers).
func openLockregWith(driver string, listen bool, more []registry.Option, moreJDBC []jdbc.Option) func(context.Context, *env, int) (instance, error) {
	return func(ctx context.Context, e *env, pool int) (instance, error) {
		db, c, err := openDB(e, driver, pool)
		if err != nil {
			return nil, err
		}
		opts := []jdbc.Option{jdbc.WithPrefix(lockregPrefix), jdbc.WithRegion("bench-" + driver), jdbc.WithGroupCommit(e.lockGroupCommit)}
		switch {
		case listen && driver == "pgx":
			opts = append(opts, jdbc.WithListener(pgxlisten.New(db)))
		case listen && driver == "postgres":
			opts = append(opts, jdbc.WithListener(pqlisten.New(e.pgDSN)))
		}
		if listen {
			opts[1] = jdbc.WithRegion("bench-" + driver + "-listen")
		}
		repo, err := jdbc.NewLockRepository(ctx, db, append(opts, moreJDBC...)...)
		if err != nil {
			db.Close()
			return nil, err
		}
		reg, err := registry.New(repo, append([]registry.Option{registry.WithErrorHandler(func(key string, err error) {
			e.logf("lockreg-%s: %s: %v", driver, key, err)
		})}, more...)...)
		if err != nil {
			db.Close()
			return nil, err
		}
		return &lockregInst{db: db, c: c, reg: reg}, nil
	}
}

func (i *lockregInst) locker(_ context.Context, key string) (locker, error) {
	return lockregLocker{i.reg.Obtain(key)}, nil
}
func (i *lockregInst) stmts() int64 { return count(i.c) }
func (i *lockregInst) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := i.reg.Close(ctx)
	return errors.Join(err, i.db.Close())
}

type lockregLocker struct{ l registry.Lock }

func (l lockregLocker) lock(ctx context.Context) error   { return l.l.LockContext(ctx) }
func (l lockregLocker) unlock(ctx context.Context) error { return l.l.UnlockContext(ctx) }

// ---- helpers ----

func sqlState(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

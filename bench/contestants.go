package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"cirello.io/pglock"
	"github.com/google/uuid"
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

// ---- Spring Integration's DefaultLockRepository + JdbcLockRegistry ----

type springInst struct {
	db       *sql.DB
	c        *counter
	iso      sql.IsolationLevel
	clientID string
	region   string
	// retries counts serialization failures (40001), retried at once.
	retries atomic.Int64
}

const (
	springUpdate = `UPDATE ` + springPrefix + `LOCK SET CLIENT_ID=$1, EXPIRED_AFTER=$2 WHERE REGION=$3 AND LOCK_KEY=$4 AND (CLIENT_ID=$5 OR EXPIRED_AFTER<$6)`
	springInsert = `INSERT INTO ` + springPrefix + `LOCK (REGION, LOCK_KEY, CLIENT_ID, CREATED_DATE, EXPIRED_AFTER) VALUES ($1,$2,$3,$4,$5)`
	springDelete = `DELETE FROM ` + springPrefix + `LOCK WHERE REGION=$1 AND LOCK_KEY=$2 AND CLIENT_ID=$3`
)

func openSpring(iso sql.IsolationLevel) func(context.Context, *env, int) (instance, error) {
	return func(ctx context.Context, e *env, pool int) (instance, error) {
		db, c, err := openPgx(e.pgDSN, pool)
		if err != nil {
			return nil, err
		}
		region := "spring-rc"
		if iso == sql.LevelSerializable {
			region = "spring-serializable"
		}
		return &springInst{db: db, c: c, iso: iso, clientID: uuid.NewString(), region: region}, nil
	}
}

func (i *springInst) locker(_ context.Context, key string) (locker, error) {
	return &springLocker{i: i, key: jdbc.UUIDKey(key)}, nil
}
func (i *springInst) stmts() int64 { return count(i.c) }
func (i *springInst) close() error { return i.db.Close() }

type springLocker struct {
	i   *springInst
	key string
}

// lock is JdbcLockRegistry.JdbcLock.lock(): doLock until it returns true,
// sleeping idleBetweenTries after false; transient data access exceptions
// (serialization failures) are retried at once.
func (l *springLocker) lock(ctx context.Context) error {
	for {
		ok, err := l.acquire(ctx)
		switch {
		case err != nil && sqlState(err) == "40001":
			l.i.retries.Add(1)
			continue
		case err != nil:
			return err
		case ok:
			return nil
		}
		if err := sleep(ctx, peerIdle); err != nil {
			return err
		}
	}
}

// acquire is DefaultLockRepository.acquire: one transaction of the
// configured isolation with UPDATE, then INSERT if the UPDATE hit no row; a
// duplicate key means "not acquired". Times come from the application's
// clock, in UTC.
func (l *springLocker) acquire(ctx context.Context) (bool, error) {
	tx, err := l.i.db.BeginTx(ctx, &sql.TxOptions{Isolation: l.i.iso})
	if err != nil {
		return false, err
	}
	now := time.Now().UTC()
	res, err := tx.ExecContext(ctx, springUpdate, l.i.clientID, now.Add(peerTTL), l.i.region, l.key, l.i.clientID, now)
	if err != nil {
		tx.Rollback()
		return false, err
	}
	if n, _ := res.RowsAffected(); n > 0 {
		return true, tx.Commit()
	}
	now = time.Now().UTC()
	_, err = tx.ExecContext(ctx, springInsert, l.i.region, l.key, l.i.clientID, now, now.Add(peerTTL))
	if err != nil {
		if sqlState(err) == "23505" {
			// The callback returns false and TransactionTemplate commits
			// (PostgreSQL turns the COMMIT of the aborted transaction
			// into a rollback).
			tx.Commit()
			return false, nil
		}
		tx.Rollback()
		return false, err
	}
	return true, tx.Commit()
}

// unlock is DefaultLockRepository.delete in its own transaction (default
// isolation).
func (l *springLocker) unlock(ctx context.Context) error {
	tx, err := l.i.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	res, err := tx.ExecContext(ctx, springDelete, l.i.region, l.key, l.i.clientID)
	if err != nil {
		tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return errors.New("spring: delete found no row of ours")
	}
	return nil
}

// ---- ShedLock, JDBC, PostgreSQL usingDbTime() ----

const (
	shedNow    = `timezone('utc', CURRENT_TIMESTAMP)`
	shedAtMost = shedNow + ` + make_interval(secs => $2)`
	shedInsert = `INSERT INTO ` + shedlockTable + `(name, lock_until, locked_at, locked_by) VALUES($1, ` + shedAtMost + `, ` + shedNow + `, $3) ` +
		`ON CONFLICT (name) DO UPDATE SET lock_until = ` + shedAtMost + `, locked_at = ` + shedNow + `, locked_by = $3 ` +
		`WHERE ` + shedlockTable + `.name = $1 AND ` + shedlockTable + `.lock_until <= ` + shedNow
	shedUpdate = `UPDATE ` + shedlockTable + ` SET lock_until = ` + shedAtMost + `, locked_at = ` + shedNow + `, locked_by = $3 ` +
		`WHERE ` + shedlockTable + `.name = $1 AND ` + shedlockTable + `.lock_until <= ` + shedNow
	shedUnlock = `UPDATE ` + shedlockTable + ` SET lock_until = CASE WHEN locked_at + make_interval(secs => $2) > ` + shedNow +
		` THEN locked_at + make_interval(secs => $2) ELSE ` + shedNow + ` END WHERE name = $1 AND locked_by = $3`
)

type shedInst struct {
	db       *sql.DB
	c        *counter
	lockedBy string

	mu    sync.Mutex
	known map[string]bool // StorageBasedLockProvider's LockRecordRegistry
}

func openShedlock(ctx context.Context, e *env, pool int) (instance, error) {
	db, c, err := openPgx(e.pgDSN, pool)
	if err != nil {
		return nil, err
	}
	return &shedInst{db: db, c: c, lockedBy: "bench-" + uuid.NewString()[:8], known: map[string]bool{}}, nil
}

func (i *shedInst) locker(_ context.Context, key string) (locker, error) {
	return &shedLocker{i: i, name: key}, nil
}
func (i *shedInst) stmts() int64 { return count(i.c) }
func (i *shedInst) close() error { return i.db.Close() }

type shedLocker struct {
	i    *shedInst
	name string
}

func (l *shedLocker) lock(ctx context.Context) error {
	for {
		ok, err := l.try(ctx)
		if err != nil || ok {
			return err
		}
		if err := sleep(ctx, peerIdle); err != nil {
			return err
		}
	}
}

// try is StorageBasedLockProvider.doLock: the upsert the first time a name
// is seen, the conditional UPDATE afterwards; each statement autocommitted.
func (l *shedLocker) try(ctx context.Context) (bool, error) {
	atMost := peerTTL.Seconds()
	l.i.mu.Lock()
	known := l.i.known[l.name]
	l.i.mu.Unlock()
	if !known {
		res, err := l.i.db.ExecContext(ctx, shedInsert, l.name, atMost, l.i.lockedBy)
		if err != nil {
			return false, err
		}
		l.i.mu.Lock()
		l.i.known[l.name] = true
		l.i.mu.Unlock()
		if n, _ := res.RowsAffected(); n > 0 {
			return true, nil
		}
	}
	res, err := l.i.db.ExecContext(ctx, shedUpdate, l.name, atMost, l.i.lockedBy)
	if err != nil {
		return false, err
	}
	n, _ := res.RowsAffected()
	return n > 0, nil
}

func (l *shedLocker) unlock(ctx context.Context) error {
	_, err := l.i.db.ExecContext(ctx, shedUnlock, l.name, 0.0, l.i.lockedBy) // lockAtLeastFor = 0
	return err
}

// ---- cirello.io/pglock ----

type pglockInst struct {
	db *sql.DB
	c  *counter
	cl *pglock.Client
}

// pglockOptions are the README's.
func pglockOptions() []pglock.ClientOption {
	return []pglock.ClientOption{
		pglock.WithLeaseDuration(3 * time.Second),
		pglock.WithHeartbeatFrequency(1 * time.Second),
		pglock.WithCustomTable(pglockTable),
	}
}

func openPglock(ctx context.Context, e *env, pool int) (instance, error) {
	db, c, err := openPgx(e.pgDSN, pool)
	if err != nil {
		return nil, err
	}
	cl, err := pglock.UnsafeNew(db, pglockOptions()...) // pglock.New accepts only lib/pq
	if err != nil {
		db.Close()
		return nil, err
	}
	return &pglockInst{db: db, c: c, cl: cl}, nil
}

func (i *pglockInst) locker(_ context.Context, key string) (locker, error) {
	return &pglockLocker{i: i, name: key}, nil
}
func (i *pglockInst) stmts() int64 { return count(i.c) }
func (i *pglockInst) close() error { return i.db.Close() }

type pglockLocker struct {
	i    *pglockInst
	name string
	l    *pglock.Lock
}

func (l *pglockLocker) lock(ctx context.Context) error {
	lk, err := l.i.cl.AcquireContext(ctx, l.name)
	if err != nil {
		return err
	}
	l.l = lk
	return nil
}

func (l *pglockLocker) unlock(ctx context.Context) error {
	lk := l.l
	l.l = nil
	return l.i.cl.ReleaseContext(ctx, lk)
}

// ---- advisory locks and the floor: one dedicated connection per locker ----

type sessionInst struct {
	kind string
	db   *sql.DB
	c    *counter

	mu    sync.Mutex
	conns []*sql.Conn
}

func openSession(kind string) func(context.Context, *env, int) (instance, error) {
	return func(ctx context.Context, e *env, pool int) (instance, error) {
		db, c, err := openPgx(e.pgDSN, pool)
		if err != nil {
			return nil, err
		}
		return &sessionInst{kind: kind, db: db, c: c}, nil
	}
}

func (i *sessionInst) locker(ctx context.Context, key string) (locker, error) {
	conn, err := i.db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	i.mu.Lock()
	i.conns = append(i.conns, conn)
	i.mu.Unlock()
	if i.kind == "floor" {
		return &sessionLocker{conn: conn, lockSQL: "SELECT 1", unlockSQL: "SELECT 1"}, nil
	}
	return &sessionLocker{conn: conn, key: key,
		lockSQL:   "SELECT pg_advisory_lock(hashtext($1))",
		unlockSQL: "SELECT pg_advisory_unlock(hashtext($1))"}, nil
}
func (i *sessionInst) stmts() int64 { return count(i.c) }
func (i *sessionInst) close() error {
	i.mu.Lock()
	for _, c := range i.conns {
		c.Close()
	}
	i.mu.Unlock()
	return i.db.Close()
}

type sessionLocker struct {
	conn               *sql.Conn
	key                string
	lockSQL, unlockSQL string
}

func (l *sessionLocker) exec(ctx context.Context, q string) error {
	var args []any
	if l.key != "" {
		args = []any{l.key}
	}
	rows, err := l.conn.QueryContext(ctx, q, args...)
	if err != nil {
		return err
	}
	for rows.Next() {
	}
	rows.Close()
	return rows.Err()
}

func (l *sessionLocker) lock(ctx context.Context) error   { return l.exec(ctx, l.lockSQL) }
func (l *sessionLocker) unlock(ctx context.Context) error { return l.exec(ctx, l.unlockSQL) }

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

package main

// The peers' lock protocols, as the benchmark runs them: Spring Integration's
// JDBC lock registry, ShedLock, pglock, and the session-level advisory lock and
// floor.

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"cirello.io/pglock"
	"github.com/google/uuid"

	"github.com/lockreg/lockreg/jdbc"
)

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

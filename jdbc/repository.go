package jdbc

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/lockreg/lockreg/registry"
)

// DB is the database a LockRepository uses. It is satisfied by *sql.DB and
// *sqlx.DB (and by *sql.Conn given a Driver method). The repository never
// starts a transaction on it: every statement runs in its own implicit one.
type DB interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	PrepareContext(ctx context.Context, query string) (*sql.Stmt, error)
	Driver() driver.Driver
}

// LockRepository is one client of a lock table: it implements
// registry.Repository with single SQL statements that read the database's
// clock. Create it with NewLockRepository. It is safe for concurrent use and
// holds no mutex across a database call.
//
// The repository remembers which keys it holds, from just before an Acquire
// statement is sent until a Release that returns nil or ErrLockLost, so that
// Close releases only rows it no longer holds.
type LockRepository struct {
	db  DB
	cfg *config

	acquire, renew, release *stmt // prepared lazily, closed by Close
	// acquireReturns says the acquire statement returns the fencing token
	// as a row (the default on PostgreSQL and SQLite); otherwise it is
	// judged by the rows it affects. releaseReturns says the release
	// statement returns the count of rows it released (PostgreSQL's
	// default, which also announces the release).
	acquireReturns, releaseReturns bool

	queue   *queue   // PostgreSQL's waiter queue; nil elsewhere
	ears    *ears    // listens for announced releases; nil without WithListener
	cleaner *cleaner // the background clean-up; nil WithoutCleanup

	sweep, sweepKeys, expireMine, selectMine, expireOne, check query

	mu      sync.Mutex
	held    map[string]*holding // by normalized LOCK_KEY
	closed  bool                // Close was called
	cleaned bool                // a Close released the rows left behind
}

// holding is what the repository knows of one key it holds or is acquiring.
type holding struct {
	acquiring int  // Acquire calls in flight
	held      bool // the last Acquire succeeded and no Release has ended it
}

// NewLockRepository returns a repository on db configured by opts; ctx
// bounds the I/O it does. It checks the options, detects the dialect from
// db's driver unless WithDialect is given, compiles the queries (the
// statements are prepared on first use) and checks the lock table's layout
// with one SELECT that reads no rows. A missing table is no error here, so
// that CreateSchema or a migration may create it later; Check reports it.
// On MySQL with a custom acquire query it also borrows a connection of db to
// read the driver's settings.
// Unless WithoutCleanup is given, the first acquisition starts the
// background clean-up (WithCleanup), one goroutine that runs until Close.
//
// It returns an error for a nil db (also a typed nil such as (*sql.DB)(nil)),
// an error wrapping ErrInvalidOption for a bad option (also for a listener
// that cannot work with db, such as package pgxlisten's on a lib/pq
// database), one wrapping ErrUnknownDialect when the driver is not
// recognised, one wrapping ErrClientFoundRows for a custom acquire query on
// MySQL connections opened with clientFoundRows=true, one wrapping
// ErrUnsupportedLayout for a lock table lockreg cannot use (such as Spring
// Integration 5.x/6.x's, or Spring 7's without FENCE), saying how to migrate
// it, and the database's error when the table cannot be checked, classified
// as Errors in the package doc says (an unreachable server is transient).
func NewLockRepository(ctx context.Context, db DB, opts ...Option) (*LockRepository, error) {
	cfg, err := newConfig(db, opts)
	if err != nil {
		return nil, err
	}
	if cfg.dialect == MySQL && cfg.querySet[qAcquire] {
		if err := refuseFoundRows(ctx, db); err != nil {
			return nil, err
		}
	}
	if c, ok := cfg.listener.(listenerCheck); ok {
		if err := c.Check(ctx); err != nil {
			return nil, fmt.Errorf("%w: WithListener: %w", ErrInvalidOption, err)
		}
	}
	defaults := defaultSQL[cfg.dialect]
	named := [3]string{defaults.acquire, defaults.renew, defaults.complete(releaseSQL)}
	if cfg.dialect == Postgres {
		named[qRelease] = defaults.complete(pgRelease) // announces the release
	}
	var prepared [3]*stmt
	for i := range named {
		option := ""
		if cfg.querySet[i] {
			named[i], option = cfg.queries[i], queryOptionNames[i]
		}
		q, err := compile(named[i], cfg.prefix, cfg.dialect)
		if err != nil {
			if option != "" {
				return nil, fmt.Errorf("%w: %s: %w", ErrInvalidOption, option, err)
			}
			return nil, fmt.Errorf("jdbc: compiling a default query: %w", err) // a bug
		}
		prepared[i] = &stmt{q: q, unprepared: cfg.noPrepare}
	}
	r := &LockRepository{
		db:      db,
		cfg:     cfg,
		acquire: prepared[qAcquire],
		renew:   prepared[qRenew],
		release: prepared[qRelease],
		held:    make(map[string]*holding),

		acquireReturns: !cfg.querySet[qAcquire] && cfg.dialect != MySQL,
		releaseReturns: !cfg.querySet[qRelease] && cfg.dialect == Postgres,
	}
	if cfg.dialect == Postgres && !cfg.querySet[qAcquire] {
		if r.queue, err = newQueue(cfg); err != nil {
			return nil, err
		}
	}
	if cfg.listener != nil {
		r.ears = newEars(cfg.listener, cfg.channel, cfg.clientID, cfg.onError)
	}
	for _, c := range []struct {
		dst   *query
		named string
	}{
		{&r.sweep, defaults.complete(defaults.sweep)},
		{&r.sweepKeys, defaults.complete(defaults.sweepKeys)},
		{&r.expireMine, defaults.complete(expireMineSQL)},
		{&r.selectMine, defaults.complete(selectMineSQL)},
		{&r.expireOne, defaults.complete(releaseSQL)}, // not a custom release query: Close touches only its own rows
		{&r.check, checkSQL},
	} {
		if *c.dst, err = compile(c.named, cfg.prefix, cfg.dialect, paramRetention, paramBatch); err != nil {
			return nil, fmt.Errorf("jdbc: compiling a default query: %w", err) // a bug
		}
	}
	if err := r.checkTable(ctx, "jdbc: new lock repository", true); err != nil {
		return nil, err
	}
	retention := cfg.cleanup[cleanLocks].retention
	r.cleaner, err = newCleaner(db, cfg, cleanLocks, "lockreg cleanup "+cfg.table,
		func(ctx context.Context, between func(context.Context, time.Duration) error) error {
			_, err := r.deleteDead(ctx, retention, between)
			return err
		},
		func(ctx context.Context, err error) error { return r.wrap(ctx, "jdbc: clean-up of "+cfg.table, err) })
	if err != nil {
		return nil, err
	}
	return r, nil
}

// ClientID returns the client id that owns the rows this repository writes.
func (r *LockRepository) ClientID() string { return r.cfg.clientID }

// lockKey maps a caller's key to LOCK_KEY and checks the result.
func (r *LockRepository) lockKey(key string) (string, error) {
	k := r.cfg.keyMapping(key)
	if len(k) == 0 || len(k) > maxLockKeyLen || !utf8.ValidString(k) || strings.IndexByte(k, 0) >= 0 {
		return "", fmt.Errorf("%w: WithKeyMapping: the mapping returned %s, not 1 to %d bytes of UTF-8 without NUL",
			ErrInvalidOption, quote(k), maxLockKeyLen)
	}
	return k, nil
}

// heldKey normalizes a LOCK_KEY for the held set: CHAR columns ignore
// trailing spaces, and PostgreSQL returns them padded.
func heldKey(lockKey string) string { return strings.TrimRight(lockKey, " ") }

// micros converts a positive ttl to whole microseconds, rounding up.
func micros(ttl time.Duration) int64 {
	m := int64(ttl / time.Microsecond)
	if ttl%time.Microsecond != 0 {
		m++
	}
	return m
}

func (r *LockRepository) params(lockKey string, ttl time.Duration) params {
	return params{lockKey: lockKey, region: r.cfg.region, clientID: r.cfg.clientID, ttl: micros(ttl),
		wait: micros(r.cfg.queueTTL), channel: r.cfg.channel}
}

// Acquire takes the lease on key for ttl if nobody holds it, if it has
// expired, or if this client holds it (then it is extended to ttl from now;
// CREATED_DATE keeps the time the row was first inserted). It reports false
// with a nil error when another client holds an unexpired lease.
//
// It is one upsert statement, one round trip once prepared, in no explicit
// transaction; expiry is computed from the database's clock. The same
// statement issues the lease's fencing token (see [registry.Lease]): the
// database's clock in microseconds, or the row's previous token plus one if
// that is greater, so a key's tokens increase across holders and survive
// the deletion of its row. A custom acquire query (WithAcquireQuery) issues
// token 0. It fails with
// an error wrapping registry.ErrClosed after Close, and with an error
// satisfying errors.Is(err, registry.ErrTransient) for failures that may
// pass on retry. ttl must be positive; it is rounded up to a microsecond
// (SQLite stores milliseconds).
func (r *LockRepository) Acquire(ctx context.Context, key string, ttl time.Duration) (registry.Lease, bool, error) {
	return r.acquireWith(ctx, "acquire", key, ttl, r.acquire)
}

// begin marks the row hk as being acquired, from before the statement is
// sent, so that a concurrent Close spares it.
func (r *LockRepository) begin(what, hk string) (*holding, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, fmt.Errorf("%s: %w", what, registry.ErrClosed)
	}
	h := r.held[hk]
	if h == nil {
		h = new(holding)
		r.held[hk] = h
	}
	h.acquiring++
	return h, nil
}

// end records the outcome of an acquisition that begin started: acquired,
// or lost to another client. After an error neither holds: a lease held
// before stays held, as the caller still relies on it.
func (r *LockRepository) end(hk string, h *holding, acquired, lostTo bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	h.acquiring--
	switch {
	case acquired:
		h.held = true
	case lostTo:
		h.held = false
	}
	if !h.held && h.acquiring == 0 {
		delete(r.held, hk)
	}
}

// affected turns the outcome of a guarded UPDATE into an error: one
// wrapping registry.ErrLockLost when it touched no row.
func (r *LockRepository) affected(ctx context.Context, what string, res sql.Result, err error) error {
	if err == nil {
		err = lost(res)
	}
	if errors.Is(err, registry.ErrLockLost) {
		return fmt.Errorf("%s: %w", what, err)
	}
	if err != nil {
		return r.wrap(ctx, what, err)
	}
	return nil
}

// acquireWith runs an acquire statement, keeping the held set.
func (r *LockRepository) acquireWith(ctx context.Context, op, key string, ttl time.Duration, st *stmt) (registry.Lease, bool, error) {
	what := opKey(op, key)
	if ttl <= 0 {
		return registry.Lease{}, false, fmt.Errorf("%s: ttl %v: %w", what, ttl, registry.ErrInvalidTTL)
	}
	lk, err := r.lockKey(key)
	if err != nil {
		return registry.Lease{}, false, fmt.Errorf("%s: %w", what, err)
	}
	hk := heldKey(lk)

	h, err := r.begin(what, hk)
	if err != nil {
		return registry.Lease{}, false, err
	}
	r.cleaner.start() // the table has rows to clean from now on
	lease, acquired, err := r.doAcquire(ctx, st, lk, ttl)
	r.end(hk, h, acquired, err == nil && !acquired)

	if err != nil {
		return registry.Lease{}, false, r.wrap(ctx, what, err)
	}
	return lease, acquired, nil
}

func (r *LockRepository) doAcquire(ctx context.Context, st *stmt, lockKey string, ttl time.Duration) (registry.Lease, bool, error) {
	args := st.q.args(r.params(lockKey, ttl))
	if r.acquireReturns {
		var lease registry.Lease
		ok, err := st.scan(ctx, r.db, args, &lease.Token)
		return lease, ok, err
	}
	res, err := st.exec(ctx, r.db, args)
	if err != nil {
		return registry.Lease{}, false, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return registry.Lease{}, false, err
	}
	switch {
	case n == 0:
		return registry.Lease{}, false, nil
	case n == 1, n == 2 && r.cfg.dialect == MySQL:
		var lease registry.Lease
		if !r.cfg.querySet[qAcquire] {
			// The default sets LAST_INSERT_ID to the token, or to 0 when
			// it left the row alone, which clientFoundRows=true counts as
			// one row affected.
			if lease.Token, err = res.LastInsertId(); err != nil {
				return registry.Lease{}, false, err
			}
			if lease.Token == 0 {
				return registry.Lease{}, false, nil
			}
		}
		return lease, true, nil
	}
	return registry.Lease{}, false, fmt.Errorf("the acquire statement affected %d rows; it must affect at most one", n)
}

// Renew extends this client's unexpired lease on key to ttl from now. It
// fails with an error wrapping registry.ErrLockLost when the lease has
// expired or is not this client's; it never revives an expired lease, even
// one still in the table under this client's id.
//
// It is one UPDATE statement, one round trip once prepared, on the
// database's clock. It keeps working after Close.
func (r *LockRepository) Renew(ctx context.Context, key string, ttl time.Duration) error {
	what := opKey("renew", key)
	if ttl <= 0 {
		return fmt.Errorf("%s: ttl %v: %w", what, ttl, registry.ErrInvalidTTL)
	}
	lk, err := r.lockKey(key)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	res, err := r.renew.exec(ctx, r.db, r.renew.q.args(r.params(lk, ttl)))
	return r.affected(ctx, what, res, err)
}

// lost returns an error wrapping registry.ErrLockLost if res affected no row.
func lost(res sql.Result) error {
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		return registry.ErrLockLost
	}
	return nil
}

// Release gives up this client's lease on key by expiring its row in place,
// expired or not (nobody else has held an expired row that is still this
// client's). The row stays, with its fencing token, for the next holder,
// until the clean-up (WithCleanup) or DeleteExpired removes it. Release
// fails with an error wrapping registry.ErrLockLost when the row is gone or
// belongs to another client.
// After it returns nil or ErrLockLost the key no longer counts as held, so
// Close may expire a row left behind.
//
// It is one UPDATE statement, one round trip once prepared. It keeps working
// after Close.
func (r *LockRepository) Release(ctx context.Context, key string) error {
	what := opKey("release", key)
	lk, err := r.lockKey(key)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if r.releaseReturns {
		var n int64
		if _, err = r.release.scan(ctx, r.db, r.release.q.args(r.params(lk, 0)), &n); err == nil && n == 0 {
			err = registry.ErrLockLost
		}
	} else {
		var res sql.Result
		if res, err = r.release.exec(ctx, r.db, r.release.q.args(r.params(lk, 0))); err == nil {
			err = lost(res)
		}
	}
	if err != nil && !errors.Is(err, registry.ErrLockLost) {
		return r.wrap(ctx, what, err) // outcome unknown: the key stays held
	}
	hk := heldKey(lk)
	r.mu.Lock()
	if h := r.held[hk]; h != nil {
		h.held = false
		if h.acquiring == 0 {
			delete(r.held, hk)
		}
	}
	r.mu.Unlock()
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// isHeld reports whether the row of lockKey is held or being acquired.
func (r *LockRepository) isHeld(lockKey string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.held[heldKey(lockKey)] != nil
}

// Close makes later Acquire calls fail with an error wrapping
// registry.ErrClosed, stops the background clean-up (cancelling a pass in
// flight and waiting, until ctx is done, for it to end), and releases
// (expires) this client's unexpired rows in its region that it does not
// hold: rows left behind by a Release that failed, or by an earlier process
// with the same client id, and the clean-up's lease, so that another
// repository takes the clean-up over at its next interval. It never
// releases a lease that is held or being acquired; Renew and Release keep
// working on those.
//
// It costs one UPDATE when no key is held, and otherwise a SELECT of this
// client's unexpired rows plus an UPDATE for each one not held. It closes the prepared
// statements. Once a Close has succeeded, Close returns nil without I/O; a
// Close that failed may be retried.
func (r *LockRepository) Close(ctx context.Context) error {
	r.mu.Lock()
	if r.cleaned {
		r.mu.Unlock()
		return nil
	}
	first := !r.closed
	r.closed = true
	noneHeld := len(r.held) == 0 // the held set can only shrink from now on
	r.mu.Unlock()

	if first {
		// The pass in flight is cancelled; its goroutine ends at once.
		r.cleaner.stop(ctx)
		if r.ears != nil {
			r.ears.stop()
		}
		if r.queue != nil {
			r.queue.acquireOrWait.close()
			r.queue.claim.close()
		}
		r.acquire.close()
		r.renew.close()
		r.release.close()
	}
	if err := r.releaseUnheld(ctx, noneHeld); err != nil {
		return r.wrap(ctx, "jdbc: close", err)
	}
	r.mu.Lock()
	r.cleaned = true
	r.mu.Unlock()
	return nil
}

func (r *LockRepository) releaseUnheld(ctx context.Context, noneHeld bool) error {
	p := r.params("", 0)
	if noneHeld {
		_, err := r.db.ExecContext(ctx, r.expireMine.sql, r.expireMine.args(p)...)
		return err
	}
	rows, err := r.db.QueryContext(ctx, r.selectMine.sql, r.selectMine.args(p)...)
	if err != nil {
		return err
	}
	var keys []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			rows.Close()
			return err
		}
		keys = append(keys, k)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, k := range keys {
		if r.isHeld(k) {
			continue
		}
		p.lockKey = k
		if _, err := r.db.ExecContext(ctx, r.expireOne.sql, r.expireOne.args(p)...); err != nil {
			return err
		}
	}
	return nil
}

// DeleteExpired deletes the expired rows of this repository's region,
// whoever their client, and returns how many it deleted (Spring
// Integration's deleteExpired); on PostgreSQL it also deletes lapsed places
// in the waiter queue. It spares a row whose token is not yet behind the
// database's clock (after the clock stepped back), so that the next token
// of its key, taken from the clock, is greater. Nothing requires calling
// it: an expired row is taken over by the next Acquire, and the background
// clean-up (WithCleanup) deletes rows once they have been expired for its
// retention. It deletes at most 1000 rows per statement, in as many
// statements as it takes, not prepared, on the database's clock (on MySQL
// each batch is a SELECT of the keys and a DELETE of them); without an
// index on EXPIRED_AFTER each statement scans the region's rows.
func (r *LockRepository) DeleteExpired(ctx context.Context) (int64, error) {
	n, err := r.deleteDead(ctx, 0, nil)
	if err != nil {
		return n, r.wrap(ctx, "jdbc: delete expired", err)
	}
	return n, nil
}

// deleteDead deletes, in batches, the region's rows that have been dead
// (deadLock) for retention and the lapsed places in the queue, calling
// between after each full batch, and returns the lock rows it deleted.
func (r *LockRepository) deleteDead(ctx context.Context, retention time.Duration,
	between func(context.Context, time.Duration) error) (int64, error) {
	p := r.params("", 0)
	p.retention, p.batch = micros(retention), cleanupBatch
	n, err := drain(ctx, func(ctx context.Context) (int64, bool, error) { return r.sweepBatch(ctx, p) }, between)
	if err != nil || r.queue == nil {
		return n, err
	}
	_, err = drain(ctx, func(ctx context.Context) (int64, bool, error) {
		m, err := execCount(r.db.ExecContext(ctx, r.queue.purge.sql, r.queue.purge.args(p)...))
		return m, m == cleanupBatch, err
	}, between)
	return n, err
}

// sweepBatch deletes one batch of dead rows and reports whether it was full.
func (r *LockRepository) sweepBatch(ctx context.Context, p params) (int64, bool, error) {
	if r.sweepKeys.sql == "" {
		n, err := execCount(r.db.ExecContext(ctx, r.sweep.sql, r.sweep.args(p)...))
		return n, n == cleanupBatch, err
	}
	rows, err := r.db.QueryContext(ctx, r.sweep.sql, r.sweep.args(p)...)
	if err != nil {
		return 0, false, err
	}
	var keys []any
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			rows.Close()
			return 0, false, err
		}
		keys = append(keys, k)
	}
	rows.Close()
	if err := rows.Err(); err != nil || len(keys) == 0 {
		return 0, false, err
	}
	n, err := execCount(r.db.ExecContext(ctx, r.sweepKeys.sql+inList(len(keys)), append(r.sweepKeys.args(p), keys...)...))
	return n, len(keys) == cleanupBatch, err
}

// execCount returns the rows an Exec affected.
func execCount(res sql.Result, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// Check verifies that the lock table exists with Spring Integration 7's
// columns and lockreg's FENCE, as Spring's repository does on start. It
// returns an error wrapping ErrNoTable when the table is missing, and one
// wrapping ErrUnsupportedLayout, which says how to migrate the table, when
// it has another layout, such as Spring Integration 5.x/6.x's. It is one
// SELECT that reads no rows, and a few more when that fails.
func (r *LockRepository) Check(ctx context.Context) error {
	return r.checkTable(ctx, "jdbc: check", false)
}

var _ registry.Repository = (*LockRepository)(nil)

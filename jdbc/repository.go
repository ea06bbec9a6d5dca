package jdbc

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/lockreg/lockreg/internal/cleanup"
	"github.com/lockreg/lockreg/internal/dialect"
	"github.com/lockreg/lockreg/internal/groupcommit"
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
	sql *lockStatements

	acquire, renew, release *stmt // prepared lazily, closed by Close
	// expire is PostgreSQL's release of a key nobody waits for, tried
	// before release unless the lease was handed over (then others
	// probably wait too); nil with a custom release query and elsewhere.
	expire *stmt
	// take is PostgreSQL's acquire of a row known to exist, tried before
	// acquire and AcquireOrWait as hints says; nil with a custom acquire
	// query and elsewhere.
	take *stmt
	// takes and expiries run the takes and the expiries that arrive while
	// one is in flight together (WithGroupCommit), in takeBatch and
	// expireBatch; nil where the dialect has no such statements or the
	// option turns them off.
	takes, expiries        *groupcommit.Batcher[*rowCall]
	takeBatch, expireBatch *stmt
	// acquireReturns says the acquire statement returns the fencing token
	// as a row (the default on PostgreSQL and SQLite); otherwise it is
	// judged by the rows it affects. releaseReturns says the release
	// statement returns the count of rows it released (PostgreSQL's
	// default, which also announces the release).
	acquireReturns, releaseReturns bool

	queue     *waitQueue      // PostgreSQL's waiter queue; nil elsewhere
	listeners *listenerHub    // listens for announced releases; nil without WithListener
	cleaner   *cleanup.Runner // the background clean-up; nil WithoutCleanup

	mu      sync.Mutex
	held    map[string]*holding // by normalized LOCK_KEY
	hints   rowHints            // which acquire statement to send first
	closed  bool                // Close was called
	cleaned bool                // a Close released the rows left behind
}

// holding is what the repository knows of one key it holds or is acquiring.
type holding struct {
	acquiring int  // Acquire calls in flight
	held      bool // the last Acquire succeeded and no Release has ended it
	handed    bool // a release handed the lease over: the key has a queue
}

// NewLockRepository returns a repository on db configured by opts; ctx
// bounds the I/O it does. It checks the options, detects the dialect from
// db's driver unless WithDialect is given, compiles the queries (the
// statements are prepared on first use) and checks the lock table's layout
// with one SELECT that reads no rows (two for a Spring Integration 5.4-6.x
// table, whose layout it then uses unless WithLayout says otherwise; see
// the package doc). A missing table is no error here, so
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
// ErrUnsupportedLayout for a lock table lockreg cannot use (of neither
// Spring layout, without lockreg's columns, or of another layout than
// WithLayout asks for), saying what to do, and the database's error when the table cannot be checked, classified
// as Errors in the package doc says (an unreachable server is transient).
func NewLockRepository(ctx context.Context, db DB, opts ...Option) (*LockRepository, error) {
	cfg, err := newConfig(db, opts)
	if err != nil {
		return nil, err
	}
	if cfg.d.FoundRows != nil && cfg.querySet[qAcquire] {
		if err := refuseFoundRows(ctx, db, cfg.d.FoundRows); err != nil {
			return nil, err
		}
	}
	if c, ok := cfg.listener.(listenerCheck); ok {
		if err := c.Check(ctx); err != nil {
			return nil, fmt.Errorf("%w: WithListener: %w", ErrInvalidOption, err)
		}
	}
	if err := settleTable(ctx, db, cfg, "jdbc: new lock repository", true); err != nil {
		return nil, err
	}
	statements, err := compileLock(cfg)
	if err != nil {
		return nil, err
	}
	r := newRepository(db, cfg, statements, cfg.noPrepare)
	if cfg.listener != nil {
		r.listeners = newListenerHub(cfg.listener, cfg.channel, cfg.clientID, cfg.reporter("listener"))
		r.listeners.tel = cfg.tel
		if r.queue != nil {
			r.listeners.handed = r.queue.announced
		}
	}
	r.cleaner = newCleanup(r)
	return r, nil
}

// newRepository returns a repository of statements on db, without a
// listener and without a clean-up; unprepared makes it execute every
// statement unprepared.
func newRepository(db DB, cfg *config, statements *lockStatements, unprepared bool) *LockRepository {
	r := &LockRepository{
		db:      db,
		cfg:     cfg,
		sql:     statements,
		acquire: &stmt{q: statements.acquire, unprepared: unprepared, tel: cfg.tel.stmt("acquire")},
		renew:   &stmt{q: statements.renew, unprepared: unprepared, tel: cfg.tel.stmt("renew")},
		release: &stmt{q: statements.release, unprepared: unprepared, tel: cfg.tel.stmt("release")},
		held:    make(map[string]*holding),
		hints:   newRowHints(cfg.queueTTL),

		acquireReturns: !cfg.querySet[qAcquire] && cfg.d.Lock.TokenRow,
		releaseReturns: !cfg.querySet[qRelease] && cfg.d.Lock.Queue != nil && cfg.layout != LayoutSpring6,
	}
	if r.releaseReturns && statements.expire.SQL != "" {
		r.expire = &stmt{q: statements.expire, unprepared: unprepared, tel: cfg.tel.stmt("release")}
	}
	if statements.take.SQL != "" {
		r.take = &stmt{q: statements.take, unprepared: unprepared, tel: cfg.tel.stmt("acquire")}
	}
	r.startGroupCommits(statements, cfg.groupCommit, unprepared)
	if q := statements.queue; q != nil {
		r.queue = &waitQueue{acquireOrWait: &stmt{q: q.acquireOrWait, unprepared: unprepared, tel: cfg.tel.stmt("acquire_or_wait")},
			handed: &stmt{q: q.handed, unprepared: unprepared, tel: cfg.tel.stmt("handed_lease")}, leave: q.leave, sweep: q.sweep}
	}
	if pool := directPool(db); pool != nil {
		for _, st := range []*stmt{r.acquire, r.release, r.take} {
			if st != nil {
				st.direct = pool
			}
		}
		if r.queue != nil {
			r.queue.acquireOrWait.direct, r.queue.handed.direct = pool, pool
		}
	}
	return r
}

// ClientID returns the client id that owns the rows this repository writes.
func (r *LockRepository) ClientID() string { return r.cfg.clientID }

// Holder returns the description of this client that its acquisitions
// write to the HOLDER column (see WithApplicationName).
func (r *LockRepository) Holder() string { return r.cfg.holder }

// lockKey maps a caller's key to LOCK_KEY and checks the result.
func (r *LockRepository) lockKey(key string) (string, error) {
	k := r.cfg.keyMapping(key)
	if dialect.CheckText(k, dialect.MaxLockKeyLen) != "" {
		return "", fmt.Errorf("%w: WithKeyMapping: the mapping returned %s, not 1 to %d bytes of UTF-8 without NUL",
			ErrInvalidOption, dialect.Quote(k), dialect.MaxLockKeyLen)
	}
	return k, nil
}

// heldKey normalizes a LOCK_KEY for the held set: CHAR columns ignore
// trailing spaces, and PostgreSQL returns them padded.
func heldKey(lockKey string) string { return strings.TrimRight(lockKey, " ") }

func (r *LockRepository) params(lockKey string, ttl time.Duration) params {
	return r.cfg.spring6(params{lockKey: lockKey, region: r.cfg.region, clientID: r.cfg.clientID, ttl: dialect.Micros(ttl),
		wait: dialect.Micros(r.cfg.queueTTL), channel: r.cfg.channel})
}

// Acquire takes the lease on key for ttl if nobody holds it, if it has
// expired, or if this client holds it (then it is extended to ttl from now;
// CREATED_DATE keeps the time the row was first inserted). It reports false
// with a nil error when another client holds an unexpired lease.
//
// It is one upsert statement, one round trip once prepared, in no explicit
// transaction (on PostgreSQL an UPDATE for a row it took before, see the
// package doc); expiry is computed from the database's clock. The same
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

// startAcquire maps key to its LOCK_KEY lk and marks its row (held-set key
// hk) as being acquired, with markAcquiring; settle ends the mark h. take
// says whether to try the take statement first (see rowHints).
func (r *LockRepository) startAcquire(what, key string) (lk, hk string, h *holding, take bool, err error) {
	if lk, err = r.lockKey(key); err != nil {
		return "", "", nil, false, fmt.Errorf("%s: %w", what, err)
	}
	hk = heldKey(lk)
	if h, take, err = r.markAcquiring(what, hk); err != nil {
		return "", "", nil, false, err
	}
	return lk, hk, h, take, nil
}

// markAcquiring marks the row hk as being acquired, from before the
// statement is sent, so that a concurrent Close spares it, and reports
// what the hints say of trying the take statement first.
func (r *LockRepository) markAcquiring(what, hk string) (*holding, bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, false, fmt.Errorf("%s: %w", what, registry.ErrClosed)
	}
	h := r.held[hk]
	if h == nil {
		h = new(holding)
		r.held[hk] = h
	}
	h.acquiring++
	return h, r.take != nil && r.hints.take(hk, time.Now()), nil
}

// settle records the outcome of an acquisition that markAcquiring
// started: acquired, or lost to another client. After an error neither
// holds: a lease held before stays held, as the caller still relies on it.
func (r *LockRepository) settle(hk string, h *holding, acquired, lostTo bool) {
	r.settleHanded(hk, h, acquired, lostTo, false)
}

// settleHanded is settle that also records whether an acquired lease was
// handed over by a release.
func (r *LockRepository) settleHanded(hk string, h *holding, acquired, lostTo, handed bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	h.acquiring--
	switch {
	case acquired:
		h.held, h.handed = true, handed
	case lostTo:
		h.held = false
	}
	if acquired || lostTo {
		r.hints.learn(hk, acquired, time.Now())
	}
	if !h.held && h.acquiring == 0 {
		delete(r.held, hk)
	}
}

// acquireWith runs an acquire statement, keeping the held set.
func (r *LockRepository) acquireWith(ctx context.Context, op, key string, ttl time.Duration, st *stmt) (registry.Lease, bool, error) {
	what := opKey(op, key)
	if ttl <= 0 {
		return registry.Lease{}, false, fmt.Errorf("%s: ttl %v: %w", what, ttl, registry.ErrInvalidTTL)
	}
	if err := r.cfg.checkSpring6TTL(ttl); err != nil {
		return registry.Lease{}, false, fmt.Errorf("%s: %w: %w", what, registry.ErrInvalidTTL, err)
	}
	lk, hk, h, take, err := r.startAcquire(what, key)
	if err != nil {
		return registry.Lease{}, false, err
	}
	r.cleaner.Start() // the table has rows to clean from now on
	var (
		lease    registry.Lease
		acquired bool
		sent     = time.Now()
	)
	if take {
		// An existing row nobody held lately: the UPDATE, and the
		// statement asked for only when it affects no row.
		lease, acquired, err = r.takeRow(ctx, key, lk, hk, ttl)
	}
	if err == nil && !acquired {
		lease, acquired, err = r.doAcquire(ctx, st, key, lk, ttl)
	}
	r.settle(hk, h, acquired, err == nil && !acquired)

	if err != nil {
		return registry.Lease{}, false, r.wrap(ctx, what, err)
	}
	if r.queue != nil && st == r.queue.acquireOrWait {
		// Not taken, the queue statement returned the token it found,
		// which the waiter's place records (see place).
		if acquired {
			r.queue.forget(hk)
		} else {
			r.queue.queued(hk, sent, lease.Token)
			lease = registry.Lease{}
		}
	}
	return lease, acquired, nil
}

func (r *LockRepository) doAcquire(ctx context.Context, st *stmt, key, lockKey string, ttl time.Duration) (registry.Lease, bool, error) {
	p := r.params(lockKey, ttl)
	p.lockName, p.holder = dialect.Readable(key), r.cfg.holder
	args := p.args(st.q)
	if r.acquireReturns {
		var lease registry.Lease
		if r.queue != nil && st == r.queue.acquireOrWait {
			// One row either way: the token it took or found, and which.
			var taken int64
			ok, err := st.scan(ctx, r.db, args, &lease.Token, &taken)
			return lease, ok && taken == 1, err
		}
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
	case n == 1, n == 2 && r.cfg.d.UpdateCountsTwo:
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

// Check verifies that the lock table exists with the columns of the
// repository's Layout and lockreg's (FENCE, and LOCK_NAME and HOLDER on a
// Spring Integration 7 table), as Spring's repository does on start, and,
// with WithListener, that the listener is connected once started: it is the
// registry.Checker that [registry.Registry.Check] calls for readiness
// probes. It returns an error wrapping ErrNoTable when the table is missing,
// one wrapping ErrUnsupportedLayout, which says what to do, when it has
// another layout, the database's error (transient for an unreachable
// server) when the table cannot be read, and one wrapping
// registry.ErrListenerDown, with the listener's last error, while the
// listener reconnects (locks still work then: waiters poll). A listener not
// started yet (no registry has waited) is no error. It is one SELECT that
// reads no rows (two on a Spring 5.4-6.x table), and a few more when that
// fails.
func (r *LockRepository) Check(ctx context.Context) error {
	if err := r.checkTable(ctx, "jdbc: check"); err != nil {
		return err
	}
	if r.listeners != nil {
		if err := r.listeners.check(); err != nil {
			return fmt.Errorf("jdbc: check: %w", err)
		}
	}
	return nil
}

var _ registry.Checker = (*LockRepository)(nil)

var _ registry.Repository = (*LockRepository)(nil)

package shedlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/lockreg/lockreg/internal/dialect"
	"github.com/lockreg/lockreg/jdbc"
	"github.com/lockreg/lockreg/registry"
)

// Repository is one client of a ShedLock table: a [registry.Repository]
// and a [tasklock.Releaser] whose leases are ShedLock's rows, so that an
// executor made with [tasklock.New] on it and Java applications using
// ShedLock's JDBC provider on the same table run each task at most once at
// a time across both. Create it with [NewRepository]. It is safe for
// concurrent use and holds no mutex across a database call.
//
// Its leases carry no fencing token (token 0): ShedLock's table has none.
type Repository struct {
	db  jdbc.DB
	cfg *settled
	sql statements

	mu     sync.Mutex
	held   map[string]*holding // by task name: leases this client took
	left   map[string]bool     // releases that failed, retried by Close
	closed bool
}

// holding is what the repository knows of a lease it took.
type holding struct {
	at       time.Time // app time: the :now of the acquisition
	released bool      // ReleaseAfter ended it; the row stays locked_by us
}

// NewRepository returns a repository on db's ShedLock table configured by
// cfg; ctx bounds the I/O it does, one SELECT that reads no rows and checks
// the table's columns. A missing table is no error here, so that
// [CreateSchema] or Java's migration may create it later; [Repository.Check]
// reports it. It returns an error wrapping [ErrInvalidConfig] for a bad
// field of cfg, one wrapping [ErrUnknownDialect] when the driver is not
// recognised, and the database's error when the table exists without
// ShedLock's columns or cannot be checked (transient errors satisfy
// errors.Is(err, registry.ErrTransient)).
func NewRepository(ctx context.Context, db jdbc.DB, cfg Config) (*Repository, error) {
	s, err := cfg.settle(db)
	if err != nil {
		return nil, err
	}
	r := &Repository{db: db, cfg: s, sql: compile(s.d, s.Table, s.UseDBTime),
		held: make(map[string]*holding), left: make(map[string]bool)}
	if err := r.check(ctx, "shedlock: new repository", true); err != nil {
		return nil, err
	}
	return r, nil
}

// LockedBy returns the value this repository writes to locked_by.
func (r *Repository) LockedBy() string { return r.cfg.LockedBy }

// Describe names the backend (the dialect's system), the table as region,
// and locked_by as client, for the registry's metrics and logs.
func (r *Repository) Describe() registry.Description {
	return registry.Description{Backend: r.cfg.d.System, Region: r.cfg.Table, Client: r.cfg.LockedBy}
}

// Check verifies that the table exists with ShedLock's columns. It returns
// an error wrapping ErrNoTable when it is missing. It is one SELECT that
// reads no rows.
func (r *Repository) Check(ctx context.Context) error { return r.check(ctx, "shedlock: check", false) }

func (r *Repository) check(ctx context.Context, what string, missingOK bool) error {
	err := dialect.SelectNothing(ctx, r.db, `SELECT name, lock_until, locked_at, locked_by FROM `+r.cfg.Table+` WHERE 1 = 0`)
	if err == nil {
		return nil
	}
	werr := r.wrap(ctx, what, err)
	if missingOK && errors.Is(werr, ErrNoTable) {
		return nil
	}
	return werr
}

// wrap classifies a database error: ctx's error, transient, ErrNoTable, or
// err as it is.
func (r *Repository) wrap(ctx context.Context, what string, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil && !errors.Is(err, ctxErr) {
		return fmt.Errorf("%s: %w: %w", what, ctxErr, err)
	}
	if dialect.IsTransient(err) {
		return registry.Transient(fmt.Errorf("%s: %w", what, err))
	}
	if r.cfg.d.IsNoTable(ctx, r.db, err, r.cfg.Table) {
		return fmt.Errorf("%s: %w: table %s does not exist; create it with shedlock.CreateSchema or ShedLock's DDL: %w",
			what, ErrNoTable, r.cfg.Table, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

func opName(op, name string) string { return "shedlock: " + op + " " + dialect.Quote(name) }

// now is the application's clock as ShedLock's ClockProvider reads it:
// truncated to the millisecond.
func now() time.Time { return time.Now().Truncate(time.Millisecond) }

// wall converts an instant to a parameter of the table's time columns: its
// wall time in the configured zone, as time.Time in UTC for PostgreSQL
// (drivers bind its wall time to TIMESTAMP), as text elsewhere (MySQL's
// driver would convert a time.Time to its loc; SQLite keeps text).
func (r *Repository) wall(t time.Time) any {
	w := t.In(r.cfg.loc)
	u := time.Date(w.Year(), w.Month(), w.Day(), w.Hour(), w.Minute(), w.Second(), w.Nanosecond(), time.UTC)
	if r.cfg.d.Name == "postgres" {
		return u
	}
	return u.Format("2006-01-02 15:04:05.000")
}

// args returns q's arguments.
func (r *Repository) args(q dialect.Query, name string, at, lockUntil, unlockTime time.Time, atMost, atLeast time.Duration) []any {
	return q.Args(func(p string) any {
		switch p {
		case pName:
			return name
		case pLockedBy:
			return r.cfg.LockedBy
		case pNow:
			return r.wall(at)
		case pLockUntil:
			return r.wall(lockUntil)
		case pUnlockTime:
			return r.wall(unlockTime)
		case pAtMost:
			return dialect.Micros(atMost)
		case pAtLeast:
			return dialect.Micros(atLeast)
		}
		return nil
	})
}

// exec runs q and returns the rows it affected.
func (r *Repository) exec(ctx context.Context, q dialect.Query, args []any) (int64, error) {
	return dialect.Count(r.db.ExecContext(ctx, q.SQL, args...))
}

// update runs q, and when it affected no row and matched is set (MySQL,
// see statements), returns the rows matched's query counts instead, with
// the same arguments: one more round trip, only then.
func (r *Repository) update(ctx context.Context, q, matched dialect.Query, args func(dialect.Query) []any) (int64, error) {
	n, err := r.exec(ctx, q, args(q))
	if err != nil || n > 0 || matched.SQL == "" {
		return n, err
	}
	err = r.db.QueryRowContext(ctx, matched.SQL, args(matched)...).Scan(&n)
	return n, err
}

// Acquire takes the lock named key for ttl (lockAtMostFor) if its row is
// missing or its lock_until has passed, as ShedLock does: lock_until =
// now + ttl, locked_at = now, locked_by = LockedBy. It reports false with a
// nil error when the lock is taken, by anyone: unlike package jdbc's, a
// lease this client holds is not extended by acquiring it again (use
// Renew), and a lease ended by ReleaseAfter stays taken until its
// lock_until for this client too.
//
// It is one statement on PostgreSQL and SQLite (an upsert), and on MySQL an
// UPDATE followed, when that took nothing, by an INSERT IGNORE. It fails
// with an error wrapping registry.ErrClosed after Close, one wrapping
// ErrInvalidConfig for a name the table cannot hold, and one wrapping
// registry.ErrInvalidTTL for a ttl that is not positive.
func (r *Repository) Acquire(ctx context.Context, key string, ttl time.Duration) (registry.Lease, bool, error) {
	what := opName("acquire", key)
	if ttl <= 0 {
		return registry.Lease{}, false, fmt.Errorf("%s: ttl %v: %w", what, ttl, registry.ErrInvalidTTL)
	}
	if err := checkName(key); err != nil {
		return registry.Lease{}, false, fmt.Errorf("%s: %w", what, err)
	}
	r.mu.Lock()
	closed := r.closed
	r.mu.Unlock()
	if closed {
		return registry.Lease{}, false, fmt.Errorf("%s: %w", what, registry.ErrClosed)
	}
	at := now()
	n, err := r.exec(ctx, r.sql.acquire, r.args(r.sql.acquire, key, at, at.Add(ttl), time.Time{}, ttl, 0))
	if err == nil && n == 0 && r.sql.insert.SQL != "" {
		n, err = r.exec(ctx, r.sql.insert, r.args(r.sql.insert, key, at, at.Add(ttl), time.Time{}, ttl, 0))
	}
	if err != nil {
		return registry.Lease{}, false, r.wrap(ctx, what, err)
	}
	if n == 0 {
		return registry.Lease{}, false, nil
	}
	r.mu.Lock()
	r.held[key] = &holding{at: at}
	delete(r.left, key)
	r.mu.Unlock()
	return registry.Lease{}, true, nil
}

// Renew extends this client's unexpired lease on key to ttl from now,
// ShedLock's extend: lock_until = now + ttl where locked_by is this
// client's and lock_until has not passed. It fails with an error wrapping
// registry.ErrLockLost when the lease has expired, is another client's, or
// was ended by ReleaseAfter. It is one UPDATE (on MySQL, a SELECT
// more when it changed nothing; see the package doc).
func (r *Repository) Renew(ctx context.Context, key string, ttl time.Duration) error {
	what := opName("renew", key)
	if ttl <= 0 {
		return fmt.Errorf("%s: ttl %v: %w", what, ttl, registry.ErrInvalidTTL)
	}
	if err := checkName(key); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	r.mu.Lock()
	h := r.held[key]
	r.mu.Unlock()
	if h != nil && h.released {
		return fmt.Errorf("%s: released: %w", what, registry.ErrLockLost)
	}
	at := now()
	n, err := r.update(ctx, r.sql.extend, r.sql.extendMatched, func(q dialect.Query) []any {
		return r.args(q, key, at, at.Add(ttl), time.Time{}, ttl, 0)
	})
	switch {
	case err != nil:
		return r.wrap(ctx, what, err)
	case n == 0:
		return fmt.Errorf("%s: %w", what, registry.ErrLockLost)
	}
	return nil
}

// Release ends this client's lease on key now, ShedLock's unlock with no
// lockAtLeastFor: lock_until = now where locked_by is this client's. It
// fails with an error wrapping registry.ErrLockLost when the row is gone
// or is another client's, and after ReleaseAfter (which ended the lease
// already; the row is left alone). A release that fails otherwise is
// retried by Close. It is one UPDATE (a SELECT more on MySQL when it
// changed nothing). It keeps working after Close.
func (r *Repository) Release(ctx context.Context, key string) error {
	what := opName("release", key)
	if err := checkName(key); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	r.mu.Lock()
	h := r.held[key]
	if h != nil && h.released {
		delete(r.held, key)
		r.mu.Unlock()
		return fmt.Errorf("%s: ended by ReleaseAfter: %w", what, registry.ErrLockLost)
	}
	r.mu.Unlock()
	err := r.unlock(ctx, key, 0, false)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil && !errors.Is(err, registry.ErrLockLost) {
		r.left[key] = true
		return r.wrap(ctx, what, err)
	}
	delete(r.held, key)
	delete(r.left, key)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// unlock runs ShedLock's unlock for atLeast after the acquisition; it
// returns registry.ErrLockLost unwrapped when it touched no row.
func (r *Repository) unlock(ctx context.Context, key string, atLeast time.Duration, markReleased bool) error {
	at := now()
	unlockTime := at
	r.mu.Lock()
	h := r.held[key]
	r.mu.Unlock()
	if h != nil && h.at.Add(atLeast).After(at) {
		unlockTime = h.at.Add(atLeast) // max(now, acquired + lockAtLeastFor)
	}
	n, err := r.update(ctx, r.sql.unlock, r.sql.unlockMatched, func(q dialect.Query) []any {
		return r.args(q, key, at, time.Time{}, unlockTime, 0, atLeast)
	})
	if err == nil && n == 0 {
		err = registry.ErrLockLost
	}
	if err == nil && markReleased {
		r.mu.Lock()
		if h := r.held[key]; h != nil {
			h.released = true
		} else {
			r.held[key] = &holding{released: true}
		}
		r.mu.Unlock()
	}
	return err
}

// ReleaseAfter ends this client's lease on key so that it stays taken
// until atLeast after it was acquired, or ends now if that time has
// passed: ShedLock's unlock, lock_until = max(now, acquired + atLeast).
// With database time, acquired is the row's locked_at and now the
// database's clock; with application time, both are this process's clock
// (acquired is the time the acquisition bound as locked_at). No client,
// this one included, takes the lock before then; Renew and Release of this
// client then fail with registry.ErrLockLost without touching the row.
//
// It fails with an error wrapping registry.ErrLockLost when the row is gone
// or another client's, and one wrapping registry.ErrInvalidTTL for a
// negative atLeast. It is one UPDATE (a SELECT more on MySQL when it
// changed nothing). It keeps working after Close.
func (r *Repository) ReleaseAfter(ctx context.Context, key string, atLeast time.Duration) error {
	what := opName("release after", key)
	if atLeast < 0 {
		return fmt.Errorf("%s: lockAtLeastFor %v: %w", what, atLeast, registry.ErrInvalidTTL)
	}
	if err := checkName(key); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if err := r.unlock(ctx, key, atLeast, true); err != nil {
		if errors.Is(err, registry.ErrLockLost) {
			return fmt.Errorf("%s: %w", what, err)
		}
		return r.wrap(ctx, what, err)
	}
	return nil
}

// Close refuses later Acquire calls with an error wrapping
// registry.ErrClosed and retries the releases that failed (one UPDATE
// each); leases still held stay held, and Renew and Release keep working.
// Rows of a process that died expire at their lock_until, as in ShedLock.
func (r *Repository) Close(ctx context.Context) error {
	r.mu.Lock()
	r.closed = true
	var left []string
	for k := range r.left {
		left = append(left, k)
	}
	r.mu.Unlock()
	var errs []error
	for _, k := range left {
		err := r.unlock(ctx, k, 0, false)
		if err != nil && !errors.Is(err, registry.ErrLockLost) {
			errs = append(errs, r.wrap(ctx, opName("close: release", k), err))
			continue
		}
		r.mu.Lock()
		delete(r.left, k)
		delete(r.held, k)
		r.mu.Unlock()
	}
	return errors.Join(errs...)
}

var (
	_ registry.Repository = (*Repository)(nil)
	_ registry.Describer  = (*Repository)(nil)
)

package jdbc

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/lockreg/lockreg/internal/dialect"
)

// Admin reads and changes a lock table as an operator does: it lists the
// leases and PostgreSQL's waiters, shows one lease, and force-releases one.
// Unlike a LockRepository it is no client: it holds no lease, writes no
// CLIENT_ID, and sees every region. Make one with NewAdmin; it is safe for
// concurrent use. Every method is one statement, not prepared; the lists
// scan the table (no index serves them), so bound them with a Limit on
// large tables.
type Admin struct {
	db  DB
	cfg *config
}

// NewAdmin returns an Admin of the lock table that opts configure: of the
// options it uses WithPrefix, WithDialect and WithKeyMapping (to find a
// key's row) and checks the rest. It does no I/O, and returns the errors of
// NewLockRepository for a bad option or an unknown driver.
func NewAdmin(db DB, opts ...Option) (*Admin, error) {
	cfg, err := newConfig(db, opts)
	if err != nil {
		return nil, err
	}
	return &Admin{db: db, cfg: cfg}, nil
}

// LeaseState selects leases by state in a LeaseFilter.
type LeaseState int

const (
	AnyLease      LeaseState = iota // held or not
	HeldLeases                      // unexpired, with a client
	ExpiredLeases                   // expired or released, kept for their token
)

// LeaseFilter selects the rows Admin.Leases lists. The zero value lists
// every row of every region.
type LeaseFilter struct {
	Region string     // Optional: only this region; "" for all
	State  LeaseState // Optional: AnyLease by default
	// NamePrefix, optional, keeps the rows whose LOCK_NAME (the key as
	// written) begins with it, compared exactly; rows without a name
	// (Spring's) never match a non-empty prefix.
	NamePrefix string
	Limit      int // Optional: at most this many rows (0: no limit)
}

// LeaseInfo is one row of the lock table.
type LeaseInfo struct {
	Region   string
	LockKey  string // LOCK_KEY: the mapped key (the MD5 UUID of Name by default)
	Name     string // LOCK_NAME: the key as written; "" for a row Spring wrote
	ClientID string // CLIENT_ID: the holder's client id; "" once released
	// Holder is HOLDER: the last lockreg holder's description
	// ("host=... pid=... app=..."); a lease a Spring client took over keeps
	// it, so trust it only next to a lockreg ClientID.
	Holder  string
	Created time.Time // CREATED_DATE, UTC: when the row was first inserted
	Expires time.Time // EXPIRED_AFTER, UTC
	Token   int64     // FENCE: the last fencing token handed out
	Held    bool      // a client holds it and it has not expired, by the database's clock
}

// Leases lists the rows that f selects, ordered by region and name (then
// LOCK_KEY). It is one SELECT.
func (a *Admin) Leases(ctx context.Context, f LeaseFilter) ([]LeaseInfo, error) {
	var where []string
	if f.Region != "" {
		where = append(where, `REGION = :region`)
	}
	switch f.State {
	case HeldLeases:
		where = append(where, `CLIENT_ID IS NOT NULL AND EXPIRED_AFTER >= {now}`)
	case ExpiredLeases:
		where = append(where, `(CLIENT_ID IS NULL OR EXPIRED_AFTER < {now})`)
	}
	if f.NamePrefix != "" {
		where = append(where, `SUBSTR(LOCK_NAME, 1, :n) = :name_prefix`)
	}
	q := a.leaseSelect()
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, ` AND `)
	}
	q += ` ORDER BY REGION, LOCK_NAME, LOCK_KEY`
	if f.Limit > 0 {
		q += ` LIMIT :limit`
	}
	return a.queryLeases(ctx, q, map[string]any{"region": f.Region, "n": utf8.RuneCountInString(f.NamePrefix),
		"name_prefix": f.NamePrefix, "limit": f.Limit})
}

// Lease returns the row of key (as the caller writes it, mapped as
// WithKeyMapping says) in region, and false when there is none. It is one
// SELECT by the primary key.
func (a *Admin) Lease(ctx context.Context, region, key string) (LeaseInfo, bool, error) {
	lk, err := a.lockKey(key)
	if err != nil {
		return LeaseInfo{}, false, err
	}
	rows, err := a.queryLeases(ctx, a.leaseSelect()+` WHERE REGION = :region AND LOCK_KEY = :lock_key`,
		map[string]any{"region": region, "lock_key": lk})
	if err != nil || len(rows) == 0 {
		return LeaseInfo{}, false, err
	}
	return rows[0], true, nil
}

// ForceRelease ends the unexpired lease on key in region, whoever holds
// it: it expires the row and hands it to nobody (CLIENT_ID NULL), so that
// the next acquisition takes it, and reports whether there was such a
// lease. It is one UPDATE.
//
// It is dangerous: the holder is not told until its next renewal or
// release fails with registry.ErrLockLost (its lease's Done closes then), and
// until then it goes on working as the holder while another client may take
// the lock. Only the fencing token still protects the guarded data: the next
// holder's token is greater, so storage that checks tokens refuses the
// stale holder's writes. Use it for a holder known to be dead, whose lease
// would otherwise last until it expires.
func (a *Admin) ForceRelease(ctx context.Context, region, key string) (bool, error) {
	lk, err := a.lockKey(key)
	if err != nil {
		return false, err
	}
	q, err := a.compile(`UPDATE {prefix}LOCK SET EXPIRED_AFTER = {past}, CLIENT_ID = NULL ` +
		`WHERE REGION = :region AND LOCK_KEY = :lock_key AND CLIENT_ID IS NOT NULL AND EXPIRED_AFTER >= {now}`)
	if err != nil {
		return false, err
	}
	res, err := a.db.ExecContext(ctx, q.SQL, q.Args(argsOf(map[string]any{"region": region, "lock_key": lk}))...)
	if err != nil {
		return false, a.wrap(ctx, "jdbc: force release", err)
	}
	n, err := res.RowsAffected()
	return n > 0, err
}

// Waiter is a live place in PostgreSQL's waiter queue.
type Waiter struct {
	Region   string
	LockKey  string
	Name     string // the LOCK_NAME of the lock's row; "" if it has none
	ClientID string
	Holder   string    // the waiter's description, as HOLDER
	Since    time.Time // when it began to wait, UTC
	Until    time.Time // when its place lapses unless it asks again, UTC
}

// Waiters lists the live places in PostgreSQL's waiter queue (repositories
// with WithListener wait there), of region or of every region for "", in
// the order they are served per lock. It is one SELECT. Other dialects have
// no queue (their waiters poll): there it returns an error wrapping
// errors.ErrUnsupported.
func (a *Admin) Waiters(ctx context.Context, region string) ([]Waiter, error) {
	if a.cfg.d.Lock.Queue == nil {
		return nil, fmt.Errorf("jdbc: waiters: %s has no waiter queue, its waiters poll: %w", a.cfg.dialect, errors.ErrUnsupported)
	}
	d := a.cfg.d
	q := `SELECT w.REGION, w.LOCK_KEY, COALESCE(l.LOCK_NAME, ''), w.CLIENT_ID, COALESCE(w.HOLDER, ''), ` +
		d.Micros(`w.WAITING_SINCE`) + `, ` + d.Micros(`w.WAITING_UNTIL`) + ` FROM {prefix}LOCK_WAIT w ` +
		`LEFT JOIN {prefix}LOCK l ON l.LOCK_KEY = w.LOCK_KEY AND l.REGION = w.REGION WHERE w.WAITING_UNTIL >= {now}`
	if region != "" {
		q += ` AND w.REGION = :region`
	}
	q += ` ORDER BY w.REGION, w.LOCK_KEY, w.WAITING_SINCE, w.CLIENT_ID`
	cq, err := a.compile(q)
	if err != nil {
		return nil, err
	}
	rows, err := a.db.QueryContext(ctx, cq.SQL, cq.Args(argsOf(map[string]any{"region": region}))...)
	if err != nil {
		return nil, a.wrap(ctx, "jdbc: waiters", err)
	}
	defer rows.Close()
	var out []Waiter
	for rows.Next() {
		var w Waiter
		var since, until int64
		if err := rows.Scan(&w.Region, &w.LockKey, &w.Name, &w.ClientID, &w.Holder, &since, &until); err != nil {
			return nil, a.wrap(ctx, "jdbc: waiters", err)
		}
		w.LockKey, w.ClientID = heldKey(w.LockKey), heldKey(w.ClientID)
		w.Since, w.Until = time.UnixMicro(since).UTC(), time.UnixMicro(until).UTC()
		out = append(out, w)
	}
	if err := rows.Err(); err != nil {
		return nil, a.wrap(ctx, "jdbc: waiters", err)
	}
	return out, nil
}

func (a *Admin) lockKey(key string) (string, error) {
	k := a.cfg.keyMapping(key)
	if dialect.CheckText(k, dialect.MaxLockKeyLen) != "" {
		return "", fmt.Errorf("%w: WithKeyMapping: the mapping returned %s, not 1 to %d bytes of UTF-8 without NUL",
			ErrInvalidOption, dialect.Quote(k), dialect.MaxLockKeyLen)
	}
	return k, nil
}

func (a *Admin) leaseSelect() string {
	d := a.cfg.d
	return `SELECT REGION, LOCK_KEY, COALESCE(LOCK_NAME, ''), COALESCE(CLIENT_ID, ''), COALESCE(HOLDER, ''), ` +
		d.Micros(`CREATED_DATE`) + `, ` + d.Micros(`EXPIRED_AFTER`) + `, FENCE, ` +
		`CASE WHEN CLIENT_ID IS NOT NULL AND EXPIRED_AFTER >= {now} THEN 1 ELSE 0 END FROM {prefix}LOCK`
}

func (a *Admin) compile(q string) (dialect.Query, error) {
	return a.cfg.d.Compile(q, a.cfg.prefix, "region", "lock_key", "n", "name_prefix", "limit")
}

func argsOf(m map[string]any) func(string) any { return func(n string) any { return m[n] } }

func (a *Admin) queryLeases(ctx context.Context, q string, args map[string]any) ([]LeaseInfo, error) {
	cq, err := a.compile(q)
	if err != nil {
		return nil, err
	}
	rows, err := a.db.QueryContext(ctx, cq.SQL, cq.Args(argsOf(args))...)
	if err != nil {
		return nil, a.wrap(ctx, "jdbc: leases", err)
	}
	defer rows.Close()
	var out []LeaseInfo
	for rows.Next() {
		var l LeaseInfo
		var created, expires, held int64
		if err := rows.Scan(&l.Region, &l.LockKey, &l.Name, &l.ClientID, &l.Holder, &created, &expires, &l.Token, &held); err != nil {
			return nil, a.wrap(ctx, "jdbc: leases", err)
		}
		l.LockKey, l.ClientID = heldKey(l.LockKey), heldKey(l.ClientID)
		l.Created, l.Expires, l.Held = time.UnixMicro(created).UTC(), time.UnixMicro(expires).UTC(), held == 1
		out = append(out, l)
	}
	if err := rows.Err(); err != nil {
		return nil, a.wrap(ctx, "jdbc: leases", err)
	}
	return out, nil
}

// wrap classifies err as the repository's errors are (see Errors in the
// package doc), naming a missing table with ErrNoTable.
func (a *Admin) wrap(ctx context.Context, what string, err error) error {
	r := &LockRepository{db: a.db, cfg: a.cfg}
	if a.cfg.d.IsNoTable(ctx, a.db, err) && ctx.Err() == nil {
		return fmt.Errorf("%s: %w", what, r.noTable(err))
	}
	return r.wrap(ctx, what, err)
}

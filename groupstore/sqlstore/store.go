package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/lockreg/lockreg/groupstore"
	"github.com/lockreg/lockreg/internal/backoff"
	"github.com/lockreg/lockreg/internal/cleanup"
	"github.com/lockreg/lockreg/internal/dialect"
	"github.com/lockreg/lockreg/registry"
)

// Store is a [groupstore.Store] in the tables INT_GROUP and
// INT_GROUP_MESSAGE (with the configured prefix), created by CreateSchema.
// Instances that share the tables and a region share groups. Make one with
// New; it is safe for concurrent use.
//
// Every operation is one transaction on the database's clock; a transaction
// that fails with a deadlock, a serialization failure or SQLITE_BUSY is
// retried up to 4 times. Round trips: Add 1 on PostgreSQL (one statement
// that locks the group row, inserts the message and creates or updates the
// group; a complete group that does not know the message costs a second
// one; Adds that wait while Config.GroupCommit are in flight, by default as many as the pool's connections, share one), and elsewhere 5 (BEGIN, an upsert of the group, an insert of the
// message, an update of the group, COMMIT; MySQL adds a SELECT ... FOR
// UPDATE); Get 1 (a join); Update 3 (BEGIN, the update, COMMIT), 4 with
// releases (the release first), 3 on PostgreSQL with IfVersion, where the
// release and the group's update are one statement; Remove 4; ClaimDue 1 on PostgreSQL (UPDATE ... FOR UPDATE SKIP
// LOCKED ... RETURNING), and elsewhere 1 plus one conditional UPDATE per due
// group, which only one claimer can win. Every statement is compiled once,
// in New. Store is a [groupstore.Locker]: Locked runs several calls in one
// transaction under the group row's lock.
//
// Group and message keys are name-based (SHA-1) UUIDs of the correlation
// key and the message UUID; the correlation key and UUID are kept as they
// are beside them.
//
// Finished groups are deleted in the background after a retention (7 days
// by default; see Config.CleanupRetention), which bounds how long a
// redelivery is recognised; Close stops that.
type Store struct {
	db     DB
	d      *dialect.Dialect
	sql    *statements
	region string
	groups string // table names
	msgs   string

	retention time.Duration
	cleaner   *cleanup.Runner // nil with DisableCleanup
	gate      keyGate         // the groups of this process's Locked calls
	batch     *batcher        // the group commit of Adds; nil where off or not one statement
}

var _ groupstore.Store = (*Store)(nil)

// groupNamespace seeds the name-based keys of groups and messages. (It
// names the package the store was first written in, so that the keys stay.)
var groupNamespace = uuid.NewSHA1(uuid.NameSpaceURL, []byte("https://github.com/lockreg/lockreg/jdbc/group"))

// New returns a store on db configured by cfg. It does no I/O;
// CreateSchema creates the tables. It returns an error wrapping
// ErrInvalidConfig for a bad cfg and one wrapping jdbc.ErrUnknownDialect
// when Dialect is unset and the driver is not recognised. Unless
// DisableCleanup is set, the first Add starts the background clean-up, one
// goroutine that runs until Close.
func New(db DB, cfg Config) (*Store, error) {
	if db == nil || dialect.IsNil(db) {
		return nil, errors.New("sqlstore: nil database")
	}
	cfg.setDefaults()
	d, err := cfg.validate(db)
	if err != nil {
		return nil, err
	}
	s := &Store{db: db, d: d, sql: compile(d, cfg.Prefix), region: cfg.Region,
		groups: cfg.Prefix + "GROUP", msgs: cfg.Prefix + "GROUP_MESSAGE", retention: cfg.CleanupRetention}
	if n := groupCommit(db, cfg.GroupCommit); s.sql.addBatch[0].SQL != "" && n > 0 {
		s.batch = newBatcher(s, n)
	}
	if !cfg.DisableCleanup {
		s.cleaner = cleanup.New(cfg.CleanupInterval, &leaseRepository{db: db, opts: cfg.lockOptions(d)},
			groupLeaseKey(cfg.Prefix), "sqlstore", s.sweep, cfg.reporter(d))
	}
	return s, nil
}

// Close stops the background clean-up: it cancels a pass in flight and
// waits, until ctx is done, for it to end. The store keeps working
// otherwise; Close only ends its background work, and a later Add does
// not restart it. It does no I/O and may be called more than once.
func (s *Store) Close(ctx context.Context) error {
	if err := s.cleaner.Stop(ctx); err != nil {
		return fmt.Errorf("sqlstore: close: %w", err)
	}
	return nil
}

func groupKeyOf(key string) string {
	return uuid.NewSHA1(groupNamespace, []byte("group:"+key)).String()
}

func messageKeyOf(id string) string {
	return uuid.NewSHA1(groupNamespace, []byte("message:"+id)).String()
}

// values returns the parameter values of the group of key.
func (s *Store) values(key string) *values {
	return &values{groupKey: groupKeyOf(key), region: s.region, correlationKey: key}
}

// wrap classifies a database error: ErrNotFound and ErrConflict as they
// are, an error wrapping ctx.Err() when ctx is done, a transient error
// (registry.ErrTransient), one wrapping ErrNoTable, or err as it is.
func (s *Store) wrap(ctx context.Context, what string, err error) error {
	return wrap(ctx, s.d, s.db, s.groups, s.msgs, what, err)
}

// wrap is Store.wrap for the tables groups and msgs on q.
func wrap(ctx context.Context, d *dialect.Dialect, q dialect.Querier, groups, msgs, what string, err error) error {
	switch {
	case errors.Is(err, groupstore.ErrNotFound), errors.Is(err, groupstore.ErrConflict):
		return fmt.Errorf("%s: %w", what, err)
	case ctx.Err() != nil:
		if errors.Is(err, ctx.Err()) {
			return fmt.Errorf("%s: %w", what, err)
		}
		return fmt.Errorf("%s: %w: %w", what, ctx.Err(), err)
	case dialect.IsTransient(err):
		return registry.Transient(fmt.Errorf("%s: %w", what, err))
	case d.IsNoTable(ctx, q, err, groups, msgs):
		return fmt.Errorf("%s: %w: tables %s and %s; create them with sqlstore.CreateSchema: %w",
			what, ErrNoTable, groups, msgs, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// inTx runs f in a transaction, retrying transient failures with backoff.
func (s *Store) inTx(ctx context.Context, f func(tx *sql.Tx) error) error {
	return s.retry(ctx, func() error { return s.tryTx(ctx, f) })
}

// retry runs f, again after a transient failure, at most 5 times in all.
func (s *Store) retry(ctx context.Context, f func() error) error {
	bo := backoff.New(5*time.Millisecond, 80*time.Millisecond)
	for attempt := 1; ; attempt++ {
		err := f()
		if err == nil || !dialect.IsTransient(err) || ctx.Err() != nil || attempt == 5 || !backoff.Sleep(ctx, bo.Next(), nil) {
			return err
		}
	}
}

// errNoChange ends a transaction that changed nothing: it is rolled back.
var errNoChange = errors.New("no change")

func (s *Store) tryTx(ctx context.Context, f func(tx *sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := f(tx); err != nil {
		tx.Rollback()
		if errors.Is(err, errNoChange) {
			return nil
		}
		return err
	}
	return tx.Commit()
}

// groupRow is a row of the group table as Add reads it (GroupColumns).
type groupRow struct {
	id                            string
	complete                      int64
	lastReleased, releases, count int64
	lastPosition, version         int64
	created                       any
}

func (r *groupRow) dest() []any {
	return []any{&r.id, &r.complete, &r.lastReleased, &r.releases, &r.count, &r.lastPosition, &r.version, &r.created}
}

func (r *groupRow) group(key string) (groupstore.Group, error) {
	created, err := dialect.ScanTime(r.created)
	return groupstore.Group{Key: key, ID: strings.TrimSpace(r.id), Size: int(r.count), Complete: r.complete != 0,
		LastReleasedSequence: r.lastReleased, Releases: r.releases, Version: r.version, Created: created}, err
}

// Add implements [groupstore.Store.Add].
func (s *Store) Add(ctx context.Context, key string, msg groupstore.Message, timeout time.Duration) (groupstore.Group, groupstore.Outcome, error) {
	g, o, _, err := s.add(ctx, nil, key, msg, timeout, nil)
	return g, o, err
}

var _ groupstore.Prober = (*Store)(nil)

// Probes implements [groupstore.Prober]: true on PostgreSQL, where
// AddProbe is Add's one statement with the probe in it. On MySQL and
// SQLite it is false, and AddProbe is Add.
func (s *Store) Probes() bool { return s.sql.addProbe[0].SQL != "" }

// AddProbe implements [groupstore.Prober]. On PostgreSQL it costs what
// Add costs, one statement (one more for a complete group that does not
// know the message); it reads the metadata of the group's unreleased
// messages in it (as JSON), and reports no fit when another transaction
// changed the group while the statement waited for the group row's lock.
// Elsewhere it is Add and reports no fit.
func (s *Store) AddProbe(ctx context.Context, key string, msg groupstore.Message, timeout time.Duration, p groupstore.Probe) (groupstore.Group, groupstore.Outcome, bool, error) {
	if !s.Probes() {
		g, o, err := s.Add(ctx, key, msg, timeout)
		return g, o, false, err
	}
	return s.add(ctx, nil, key, msg, timeout, &p)
}

// querier runs statements: the store's database or a transaction.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// add is Add in tx, or without one in a transaction of its own: one
// statement where the dialect has a one-statement add (PostgreSQL), else
// BEGIN, the statements and COMMIT. With probe (PostgreSQL only) it
// probes in that statement and reports the fit.
func (s *Store) add(ctx context.Context, tx *sql.Tx, key string, msg groupstore.Message, timeout time.Duration,
	probe *groupstore.Probe) (groupstore.Group, groupstore.Outcome, bool, error) {
	what := "sqlstore: add " + dialect.Quote(key)
	if msg.UUID == "" {
		return groupstore.Group{}, 0, false, fmt.Errorf("%s: message without UUID", what)
	}
	v := s.values(key)
	v.groupID, v.messageKey, v.messageID, v.payload = uuid.NewString(), messageKeyOf(msg.UUID), msg.UUID, msg.Payload
	v.timeout, v.probe = dialect.Micros(timeout), probe
	if len(msg.Metadata) > 0 { // NULL for no metadata
		b, err := json.Marshal(msg.Metadata)
		if err != nil {
			return groupstore.Group{}, 0, false, fmt.Errorf("%s: %w", what, err)
		}
		v.metadata = string(b)
	}
	s.cleaner.Start() // the tables have rows to clean from now on
	if tx == nil {
		if err := s.gate.wait(ctx, key); err != nil {
			return groupstore.Group{}, 0, false, s.wrap(ctx, what, err)
		}
	}
	var (
		g       groupstore.Group
		outcome groupstore.Outcome
		fits    bool
		err     error
	)
	switch one := s.sql.addOne[0].SQL != ""; {
	case one && tx != nil:
		g, outcome, fits, err = s.addOne(ctx, tx, false, key, v, timeout)
	case one && s.batch != nil:
		c := &addCall{ctx: ctx, key: key, v: v, timeout: timeout}
		s.batch.add(c)
		g, outcome, fits, err = c.g, c.outcome, c.fits, c.err
	case one:
		err = s.retry(ctx, func() (err error) {
			g, outcome, fits, err = s.addOne(ctx, s.db, true, key, v, timeout)
			return err
		})
	case tx != nil:
		g, outcome, err = s.addIn(ctx, tx, key, v, timeout) // no probe: only PostgreSQL has one
		if errors.Is(err, errNoChange) {
			err = nil // it changed nothing: the caller's transaction goes on
		}
	default:
		err = s.inTx(ctx, func(tx *sql.Tx) (err error) {
			g, outcome, err = s.addIn(ctx, tx, key, v, timeout)
			return err
		})
	}
	if err != nil {
		return groupstore.Group{}, 0, false, s.wrap(ctx, what, err)
	}
	return g, outcome, fits, nil
}

// addOne adds the message of v with the dialect's one-statement add on q,
// a transaction of the caller's or, where alone, the store's pool. Alone,
// the dialect's AddInPlace goes first where it has one; a complete group,
// a redelivery or a group created meanwhile then costs AddMessage after
// it. Only a complete group that did not take the message costs a
// statement more, which tells a redelivery from a late message by a
// fresh read. With v.probe it probes too and reports the fit.
func (s *Store) addOne(ctx context.Context, q querier, alone bool, key string, v *values, timeout time.Duration) (groupstore.Group, groupstore.Outcome, bool, error) {
	probe, due := 0, 0
	if v.probe != nil {
		probe = 1
	}
	if timeout > 0 {
		due = 1
	}
	var (
		row         groupRow
		added, fits int64
	)
	dest := append(row.dest(), &added)
	if probe == 1 {
		dest = append(dest, &fits)
	}
	if in := s.sql.addInPlace[probe][due]; alone && in.SQL != "" {
		err := q.QueryRowContext(ctx, in.SQL, v.args(in)...).Scan(dest...)
		if err == nil {
			return s.added(ctx, q, key, v, &row, added, fits)
		}
		if !errors.Is(err, sql.ErrNoRows) && dialect.SQLState(err) != uniqueViolation {
			return groupstore.Group{}, 0, false, err
		}
	}
	add := [2][2]dialect.Query{s.sql.addOne, s.sql.addProbe}[probe][due]
	if err := q.QueryRowContext(ctx, add.SQL, v.args(add)...).Scan(dest...); err != nil {
		return groupstore.Group{}, 0, false, err
	}
	return s.added(ctx, q, key, v, &row, added, fits)
}

// uniqueViolation is PostgreSQL's SQLSTATE of a duplicate key.
const uniqueViolation = "23505"

// added returns what the one-statement Add of v to the group of key did,
// from the group's row and ADDED and FITS as it returned them; a message
// that a complete group does not hold costs one more statement on q.
func (s *Store) added(ctx context.Context, q querier, key string, v *values, row *groupRow, added, fits int64) (groupstore.Group, groupstore.Outcome, bool, error) {
	g, err := row.group(key)
	if err != nil {
		return g, 0, false, err
	}
	switch {
	case added == 1:
		return g, groupstore.Added, fits == 1, nil
	case !g.Complete:
		return g, groupstore.Duplicate, fits == 1, nil
	}
	o, err := s.knownOrLate(ctx, q, v)
	return g, o, fits == 1, err
}

// knownOrLate tells whether the complete group of v knows its message
// (Duplicate) or not (Rejected).
func (s *Store) knownOrLate(ctx context.Context, q querier, v *values) (groupstore.Outcome, error) {
	var released int64
	sel := s.sql.selectReleased
	switch err := q.QueryRowContext(ctx, sel.SQL, v.args(sel)...).Scan(&released); {
	case errors.Is(err, sql.ErrNoRows):
		return groupstore.Rejected, nil
	case err != nil:
		return 0, err
	}
	return groupstore.Duplicate, nil
}

// addIn adds the message of v in tx, statement by statement. It returns
// errNoChange with the outcome when it changed nothing.
func (s *Store) addIn(ctx context.Context, tx *sql.Tx, key string, v *values, timeout time.Duration) (groupstore.Group, groupstore.Outcome, error) {
	var row groupRow
	up := s.sql.upsert
	var err error
	if s.sql.lockGroup.SQL == "" {
		err = tx.QueryRowContext(ctx, up.SQL, v.args(up)...).Scan(row.dest()...)
	} else if _, err = tx.ExecContext(ctx, up.SQL, v.args(up)...); err == nil {
		lock := s.sql.lockGroup
		err = tx.QueryRowContext(ctx, lock.SQL, v.args(lock)...).Scan(row.dest()...)
	}
	if err != nil {
		return groupstore.Group{}, 0, err
	}
	g, err := row.group(key)
	if err != nil {
		return g, 0, err
	}
	if g.Complete {
		o, err := s.knownOrLate(ctx, tx, v)
		if err != nil {
			return g, 0, err
		}
		return g, o, errNoChange
	}
	v.position = row.lastPosition + 1
	ins := s.sql.insertMessage
	if n, err := dialect.Count(tx.ExecContext(ctx, ins.SQL, v.args(ins)...)); err != nil {
		return g, 0, err
	} else if n == 0 {
		return g, groupstore.Duplicate, errNoChange
	}
	upd := s.sql.addMessage[0]
	if timeout > 0 {
		upd = s.sql.addMessage[1]
	}
	if _, err := tx.ExecContext(ctx, upd.SQL, v.args(upd)...); err != nil {
		return g, 0, err
	}
	g.Size++
	g.Version++
	return g, groupstore.Added, nil
}

// Get implements [groupstore.Store.Get] with one query.
func (s *Store) Get(ctx context.Context, key string) (groupstore.Group, error) {
	return s.get(ctx, s.db, key)
}

// get is Get on db.
func (s *Store) get(ctx context.Context, db querier, key string) (groupstore.Group, error) {
	g, _, err := s.read(ctx, db, s.sql.selectGroup, false, key)
	return g, err
}

// read runs q, SelectGroup or (lockGet) LockGet, and returns the group it
// read and, for LockGet, the VERSION of its locked row (else 0).
func (s *Store) read(ctx context.Context, db querier, q dialect.Query, lockGet bool, key string) (groupstore.Group, int64, error) {
	what := "sqlstore: get " + dialect.Quote(key)
	rows, err := db.QueryContext(ctx, q.SQL, s.values(key).args(q)...)
	if err != nil {
		return groupstore.Group{}, 0, s.wrap(ctx, what, err)
	}
	defer rows.Close()
	g := groupstore.Group{Key: key}
	found := false
	var locked int64
	for rows.Next() {
		var (
			complete, count       int64
			due, created, updated any
			id, meta              sql.NullString
			payload               []byte
		)
		dest := []any{&g.ID, &complete, &g.LastReleasedSequence, &g.Releases, &count, &g.Version,
			&due, &created, &updated, &id, &meta, &payload}
		if lockGet {
			dest = append(dest, &locked)
		}
		if err := rows.Scan(dest...); err != nil {
			return groupstore.Group{}, 0, s.wrap(ctx, what, err)
		}
		if !found {
			found = true
			g.ID, g.Complete, g.Size = strings.TrimSpace(g.ID), complete != 0, int(count)
			var err error
			if g.Due, err = dialect.ScanTime(due); err == nil {
				if g.Created, err = dialect.ScanTime(created); err == nil {
					g.Updated, err = dialect.ScanTime(updated)
				}
			}
			if err != nil {
				return groupstore.Group{}, 0, fmt.Errorf("%s: %w", what, err)
			}
		}
		if !id.Valid {
			continue // a group without unreleased messages
		}
		m := groupstore.Message{UUID: id.String, Payload: payload}
		if meta.Valid {
			if err := json.Unmarshal([]byte(meta.String), &m.Metadata); err != nil {
				return groupstore.Group{}, 0, fmt.Errorf("%s: metadata of %s: %w", what, dialect.Quote(id.String), err)
			}
		}
		g.Messages = append(g.Messages, m)
	}
	if err := rows.Err(); err != nil {
		return groupstore.Group{}, 0, s.wrap(ctx, what, err)
	}
	if !found {
		return groupstore.Group{}, 0, fmt.Errorf("%s: %w", what, groupstore.ErrNotFound)
	}
	return g, locked, nil
}

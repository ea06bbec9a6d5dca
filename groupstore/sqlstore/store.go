package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
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
// that updates the group's row, or creates the group, and inserts the
// message; a complete group, a redelivery or a group that another
// instance created at the same moment costs a second one that locks the
// row first, and a complete group that does not know the message a third;
// Adds that wait while Config.GroupCommit are in flight, by default as many as the pool's connections, share one), and elsewhere 5 (BEGIN, an upsert of the group, an insert of the
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
	noSummary atomic.Bool     // the group table lacks the probe summary's columns (script 000008)
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

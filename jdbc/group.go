package jdbc

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"

	"github.com/lockreg/lockreg/groupstore"
	"github.com/lockreg/lockreg/internal/dialect"
	"github.com/lockreg/lockreg/registry"
)

// TxDB is the database a GroupStore uses: a [DB] that can also begin
// transactions. *sql.DB and *sqlx.DB satisfy it.
type TxDB interface {
	DB
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}

// GroupStore is a [groupstore.Store] in the tables INT_GROUP and
// INT_GROUP_MESSAGE (with the configured prefix), created by CreateSchema.
// Instances that share the tables and a region share groups. Make one with
// NewGroupStore; it is safe for concurrent use.
//
// Every operation is one transaction on the database's clock; a transaction
// that fails with a deadlock, a serialization failure or SQLITE_BUSY is
// retried up to 4 times. Round trips: Add 5 (BEGIN, an upsert of the group,
// an insert of the message, an update of the group, COMMIT; MySQL adds a
// SELECT ... FOR UPDATE); Get 1 (a join); Update 1 without releases, 4 with
// them; Remove 4; ClaimDue 1 on PostgreSQL (UPDATE ... FOR UPDATE SKIP
// LOCKED ... RETURNING), and elsewhere 1 plus one conditional UPDATE per due
// group, which only one claimer can win.
//
// Group and message keys are name-based (SHA-1) UUIDs of the correlation
// key and the message UUID; the correlation key and UUID are kept as they
// are beside them.
//
// Finished groups are deleted in the background after a retention (7 days
// by default; see WithGroupCleanup), which bounds how long a redelivery is
// recognised; Close stops that.
type GroupStore struct {
	db      TxDB
	d       *dialect.Dialect
	dialect Dialect
	region  string
	groups  string // table names
	msgs    string
	now     string   // the dialect's current UTC time
	cleaner *cleaner // nil WithoutCleanup
}

var _ groupstore.Store = (*GroupStore)(nil)

// groupNamespace seeds the name-based keys of groups and messages.
var groupNamespace = uuid.NewSHA1(uuid.NameSpaceURL, []byte("https://github.com/lockreg/lockreg/jdbc/group"))

// NewGroupStore returns a group store on db. Of the options it uses
// WithPrefix, WithRegion and WithDialect, as NewLockRepository does,
// WithGroupCleanup, WithoutCleanup and WithErrorHandler, and checks the
// others. It does no I/O; CreateSchema creates the tables. Unless
// WithoutCleanup is given, the first Add starts the background clean-up,
// which runs until Close.
func NewGroupStore(db TxDB, opts ...Option) (*GroupStore, error) {
	if db == nil || isNil(db) {
		return nil, errors.New("jdbc: nil database")
	}
	cfg, err := newConfig(db, opts)
	if err != nil {
		return nil, err
	}
	s := &GroupStore{db: db, d: cfg.d, dialect: cfg.dialect, region: cfg.region,
		groups: cfg.prefix + "GROUP", msgs: cfg.prefix + "GROUP_MESSAGE"}
	switch cfg.dialect {
	case Postgres:
		s.now = `timezone('UTC', now())`
	case MySQL:
		s.now = `UTC_TIMESTAMP(6)`
	case SQLite:
		s.now = `strftime('%Y-%m-%d %H:%M:%f', 'now')`
	}
	retention := cfg.cleanup[cleanGroups].retention
	s.cleaner = newCleaner(db, cfg, cleanGroups, "lockreg cleanup "+s.groups,
		func(ctx context.Context, between func(context.Context, time.Duration) error) error {
			_, err := s.deleteCompleted(ctx, retention, between)
			return err
		},
		func(ctx context.Context, err error) error {
			return s.wrapGroup(ctx, "jdbc: clean-up of "+s.groups, err)
		})
	return s, nil
}

// Close stops the background clean-up: it cancels a pass in flight and
// waits, until ctx is done, for it to end. The store keeps working
// otherwise; Close only ends its background work, and a later Add does
// not restart it. It does no I/O and may be called more than once.
func (s *GroupStore) Close(ctx context.Context) error {
	if err := s.cleaner.stop(ctx); err != nil {
		return fmt.Errorf("jdbc: group store close: %w", err)
	}
	return nil
}

// finished is the condition on a group (alias g) that the clean-up may
// delete, with the parameters region and -retention in microseconds: it is
// complete, holds no unreleased message, has no due time (no timeout, no
// scheduled removal) and has not changed for the retention.
func finished(g string) string {
	return g + `.REGION = ? AND ` + g + `.COMPLETE = 1 AND ` + g + `.MESSAGE_COUNT = 0 AND ` + g + `.DUE_AT IS NULL AND ` +
		g + `.UPDATED_DATE < {PLUS}`
}

// DeleteCompleted deletes the finished groups of the store's region that
// have not changed for olderThan, with the rows that remember their
// messages, and returns how many groups it deleted. Finished means
// complete, without unreleased messages and without a due time (see
// WithGroupCleanup); open groups and groups with a pending timeout are
// never deleted. A message of a deleted group is no longer recognised: Add
// treats it as the first of a new group. The background clean-up calls it
// with its retention; call it yourself WithoutCleanup.
//
// It deletes at most 1000 rows per statement, in as many statements as it
// takes, each in its own implicit transaction: message rows first, then
// the groups left without any (on MySQL each batch first SELECTs up to 1000
// finished groups, a consistent read that locks nothing, and the DELETEs
// then name them). Each statement scans the region's groups without a due
// time. olderThan must not be negative.
func (s *GroupStore) DeleteCompleted(ctx context.Context, olderThan time.Duration) (int64, error) {
	if olderThan < 0 {
		return 0, fmt.Errorf("jdbc: group delete completed: olderThan %v: %w", olderThan, ErrInvalidOption)
	}
	n, err := s.deleteCompleted(ctx, olderThan, nil)
	if err != nil {
		return n, s.wrapGroup(ctx, "jdbc: group delete completed", err)
	}
	return n, nil
}

// deleteCompleted deletes finished groups in batches, calling between after
// each full batch, and returns the groups it deleted.
func (s *GroupStore) deleteCompleted(ctx context.Context, retention time.Duration,
	between func(context.Context, time.Duration) error) (int64, error) {
	ago := -micros(retention)
	if s.dialect == MySQL {
		return drain(ctx, func(ctx context.Context) (int64, bool, error) { return s.sweepMySQL(ctx, ago) }, between)
	}
	// PostgreSQL's SKIP LOCKED passes over rows another transaction is
	// writing; the locked rows' conditions are checked again on their
	// latest version. SQLite has one writer at a time.
	msgs := `DELETE FROM {M} WHERE (GROUP_KEY, REGION, MESSAGE_KEY) IN (SELECT m.GROUP_KEY, m.REGION, m.MESSAGE_KEY ` +
		`FROM {M} m JOIN {G} g ON g.GROUP_KEY = m.GROUP_KEY AND g.REGION = m.REGION WHERE ` + finished("g") +
		` LIMIT ? FOR UPDATE SKIP LOCKED)`
	groups := `DELETE FROM {G} WHERE (GROUP_KEY, REGION) IN (SELECT g.GROUP_KEY, g.REGION FROM {G} g WHERE ` + finished("g") +
		` AND NOT EXISTS (SELECT 1 FROM {M} m WHERE m.GROUP_KEY = g.GROUP_KEY AND m.REGION = g.REGION) LIMIT ? FOR UPDATE SKIP LOCKED)`
	if s.dialect == SQLite {
		msgs = `DELETE FROM {M} WHERE rowid IN (SELECT m.rowid ` +
			`FROM {M} m JOIN {G} g ON g.GROUP_KEY = m.GROUP_KEY AND g.REGION = m.REGION WHERE ` + finished("g") + ` LIMIT ?)`
		groups = `DELETE FROM {G} WHERE rowid IN (SELECT g.rowid FROM {G} g WHERE ` + finished("g") +
			` AND NOT EXISTS (SELECT 1 FROM {M} m WHERE m.GROUP_KEY = g.GROUP_KEY AND m.REGION = g.REGION) LIMIT ?)`
	}
	batch := func(query string) func(context.Context) (int64, bool, error) {
		query = s.q(query)
		return func(ctx context.Context) (int64, bool, error) {
			n, err := dialect.Count(s.db.ExecContext(ctx, query, s.region, ago, cleanupBatch))
			return n, n == cleanupBatch, err
		}
	}
	if _, err := drain(ctx, batch(msgs), between); err != nil {
		return 0, err
	}
	return drain(ctx, batch(groups), between)
}

// sweepMySQL deletes one batch of finished groups on MySQL: without an
// index that finds them, a DELETE ... LIMIT would lock every row it
// passes under REPEATABLE READ, so a consistent read selects them and the
// DELETEs name them, checking the condition again.
func (s *GroupStore) sweepMySQL(ctx context.Context, ago int64) (int64, bool, error) {
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT g.GROUP_KEY FROM {G} g WHERE `+finished("g")+` LIMIT ?`),
		s.region, ago, cleanupBatch)
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
	in := inList(len(keys))
	args := append(append([]any{s.region}, keys...), s.region, ago)
	msgs := s.q(`DELETE FROM {M} WHERE REGION = ? AND GROUP_KEY IN ` + in + ` AND EXISTS (SELECT 1 FROM {G} g ` +
		`WHERE g.GROUP_KEY = {M}.GROUP_KEY AND ` + finished("g") + `) LIMIT ?`)
	for {
		n, err := dialect.Count(s.db.ExecContext(ctx, msgs, append(args, cleanupBatch)...))
		if err != nil {
			return 0, false, err
		}
		if n < cleanupBatch {
			break
		}
	}
	n, err := dialect.Count(s.db.ExecContext(ctx, s.q(`DELETE FROM {G} WHERE REGION = ? AND GROUP_KEY IN `+in+` AND `+
		finished("{G}")+` AND NOT EXISTS (SELECT 1 FROM {M} m WHERE m.GROUP_KEY = {G}.GROUP_KEY AND m.REGION = {G}.REGION)`),
		args...))
	return n, len(keys) == cleanupBatch, err
}

// q completes a statement: G and M name the tables, NOW is the current
// time, PLUS(?) the current time plus ? microseconds; placeholders are ?.
func (s *GroupStore) q(query string) string {
	var plus string
	switch s.dialect {
	case Postgres:
		plus = `timezone('UTC', now()) + CAST(? AS BIGINT) * INTERVAL '1 microsecond'`
	case MySQL:
		plus = `UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND`
	case SQLite:
		plus = `strftime('%Y-%m-%d %H:%M:%f', 'now', printf('%.6f seconds', ? / 1000000.0))`
	}
	query = strings.NewReplacer("{G}", s.groups, "{M}", s.msgs, "{NOW}", s.now, "{PLUS}", plus).Replace(query)
	if s.dialect == Postgres {
		return sqlx.Rebind(sqlx.DOLLAR, query)
	}
	return query
}

func groupKeyOf(key string) string {
	return uuid.NewSHA1(groupNamespace, []byte("group:"+key)).String()
}
func messageKeyOf(id string) string {
	return uuid.NewSHA1(groupNamespace, []byte("message:"+id)).String()
}

// wrapGroup classifies a database error as wrap does for LockRepository.
func (s *GroupStore) wrapGroup(ctx context.Context, what string, err error) error {
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
	case s.d.IsNoTable(ctx, s.db, err, s.groups, s.msgs):
		return fmt.Errorf("%s: %w: tables %s and %s; create them with jdbc.CreateSchema: %w",
			what, ErrNoTable, s.groups, s.msgs, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// inTx runs f in a transaction, retrying transient failures.
func (s *GroupStore) inTx(ctx context.Context, f func(tx *sql.Tx) error) error {
	var err error
	for attempt := 1; ; attempt++ {
		err = s.tryTx(ctx, f)
		if err == nil || !dialect.IsTransient(err) || ctx.Err() != nil || attempt == 5 {
			return err
		}
		t := time.NewTimer(time.Duration(attempt*attempt) * 5 * time.Millisecond)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return err
		}
	}
}

// errNoChange ends a transaction that changed nothing: it is rolled back.
var errNoChange = errors.New("no change")

func (s *GroupStore) tryTx(ctx context.Context, f func(tx *sql.Tx) error) error {
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

const groupColumns = `GROUP_ID, COMPLETE, LAST_RELEASED_SEQUENCE, RELEASES, MESSAGE_COUNT, LAST_POSITION, VERSION, CREATED_DATE`

// groupRow is a row of the group table as Add reads it.
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
func (s *GroupStore) Add(ctx context.Context, key string, msg groupstore.Message, timeout time.Duration) (groupstore.Group, groupstore.Outcome, error) {
	what := "jdbc: group add " + quote(key)
	if msg.UUID == "" {
		return groupstore.Group{}, 0, fmt.Errorf("%s: message without UUID", what)
	}
	var meta any // NULL for no metadata
	if len(msg.Metadata) > 0 {
		b, err := json.Marshal(msg.Metadata)
		if err != nil {
			return groupstore.Group{}, 0, fmt.Errorf("%s: %w", what, err)
		}
		meta = string(b)
	}
	s.cleaner.start() // the tables have rows to clean from now on
	gk, mk := groupKeyOf(key), messageKeyOf(msg.UUID)
	var (
		g       groupstore.Group
		outcome groupstore.Outcome
	)
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var row groupRow
		insert := `INSERT INTO {G} (GROUP_KEY, REGION, CORRELATION_KEY, GROUP_ID, COMPLETE, LAST_RELEASED_SEQUENCE, RELEASES, ` +
			`MESSAGE_COUNT, LAST_POSITION, VERSION, CREATED_DATE, UPDATED_DATE) VALUES (?, ?, ?, ?, 0, 0, 0, 0, 0, 0, {NOW}, {NOW}) `
		args := []any{gk, s.region, key, uuid.NewString()}
		var err error
		if s.dialect == MySQL {
			if _, err = tx.ExecContext(ctx, s.q(insert+`ON DUPLICATE KEY UPDATE GROUP_KEY = GROUP_KEY`), args...); err != nil {
				return err
			}
			err = tx.QueryRowContext(ctx, s.q(`SELECT `+groupColumns+` FROM {G} WHERE GROUP_KEY = ? AND REGION = ? FOR UPDATE`),
				gk, s.region).Scan(row.dest()...)
		} else {
			err = tx.QueryRowContext(ctx, s.q(insert+`ON CONFLICT (GROUP_KEY, REGION) DO UPDATE SET GROUP_KEY = excluded.GROUP_KEY `+
				`RETURNING `+groupColumns), args...).Scan(row.dest()...)
		}
		if err != nil {
			return err
		}
		if g, err = row.group(key); err != nil {
			return err
		}
		if g.Complete {
			var released int64
			err := tx.QueryRowContext(ctx, s.q(`SELECT RELEASED FROM {M} WHERE GROUP_KEY = ? AND REGION = ? AND MESSAGE_KEY = ?`),
				gk, s.region, mk).Scan(&released)
			switch {
			case errors.Is(err, sql.ErrNoRows):
				outcome = groupstore.Rejected
			case err != nil:
				return err
			default:
				outcome = groupstore.Duplicate
			}
			return errNoChange
		}
		ins := `INSERT INTO {M} (GROUP_KEY, REGION, MESSAGE_KEY, MESSAGE_ID, POSITION, RELEASED, METADATA, PAYLOAD, CREATED_DATE) ` +
			`VALUES (?, ?, ?, ?, ?, 0, ?, ?, {NOW}) `
		if s.dialect == MySQL {
			ins += `ON DUPLICATE KEY UPDATE MESSAGE_KEY = MESSAGE_KEY`
		} else {
			ins += `ON CONFLICT (GROUP_KEY, REGION, MESSAGE_KEY) DO NOTHING`
		}
		res, err := tx.ExecContext(ctx, s.q(ins), gk, s.region, mk, msg.UUID, row.lastPosition+1, meta, msg.Payload)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			outcome = groupstore.Duplicate
			return errNoChange
		}
		upd := `UPDATE {G} SET MESSAGE_COUNT = MESSAGE_COUNT + 1, LAST_POSITION = ?, VERSION = VERSION + 1, UPDATED_DATE = {NOW}`
		uargs := []any{row.lastPosition + 1}
		if timeout > 0 {
			upd += `, DUE_AT = {PLUS}, CLAIMED_UNTIL = NULL`
			uargs = append(uargs, micros(timeout))
		}
		if _, err := tx.ExecContext(ctx, s.q(upd+` WHERE GROUP_KEY = ? AND REGION = ?`), append(uargs, gk, s.region)...); err != nil {
			return err
		}
		g.Size++
		g.Version++
		outcome = groupstore.Added
		return nil
	})
	if err != nil {
		return groupstore.Group{}, 0, s.wrapGroup(ctx, what, err)
	}
	return g, outcome, nil
}

// Get implements [groupstore.Store.Get] with one query.
func (s *GroupStore) Get(ctx context.Context, key string) (groupstore.Group, error) {
	what := "jdbc: group get " + quote(key)
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT g.GROUP_ID, g.COMPLETE, g.LAST_RELEASED_SEQUENCE, g.RELEASES, g.MESSAGE_COUNT, `+
		`g.VERSION, g.DUE_AT, g.CREATED_DATE, g.UPDATED_DATE, m.MESSAGE_ID, m.METADATA, m.PAYLOAD `+
		`FROM {G} g LEFT JOIN {M} m ON m.GROUP_KEY = g.GROUP_KEY AND m.REGION = g.REGION AND m.RELEASED = 0 `+
		`WHERE g.GROUP_KEY = ? AND g.REGION = ? ORDER BY m.POSITION`), groupKeyOf(key), s.region)
	if err != nil {
		return groupstore.Group{}, s.wrapGroup(ctx, what, err)
	}
	defer rows.Close()
	g := groupstore.Group{Key: key}
	found := false
	for rows.Next() {
		var (
			complete, count       int64
			due, created, updated any
			id, meta              sql.NullString
			payload               []byte
		)
		if err := rows.Scan(&g.ID, &complete, &g.LastReleasedSequence, &g.Releases, &count, &g.Version,
			&due, &created, &updated, &id, &meta, &payload); err != nil {
			return groupstore.Group{}, s.wrapGroup(ctx, what, err)
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
				return groupstore.Group{}, fmt.Errorf("%s: %w", what, err)
			}
		}
		if !id.Valid {
			continue // a group without unreleased messages
		}
		m := groupstore.Message{UUID: id.String, Payload: payload}
		if meta.Valid {
			if err := json.Unmarshal([]byte(meta.String), &m.Metadata); err != nil {
				return groupstore.Group{}, fmt.Errorf("%s: metadata of %s: %w", what, quote(id.String), err)
			}
		}
		g.Messages = append(g.Messages, m)
	}
	if err := rows.Err(); err != nil {
		return groupstore.Group{}, s.wrapGroup(ctx, what, err)
	}
	if !found {
		return groupstore.Group{}, fmt.Errorf("%s: %w", what, groupstore.ErrNotFound)
	}
	return g, nil
}

// missingOrConflict tells why a conditional statement on the group of gk
// changed nothing.
func (s *GroupStore) missingOrConflict(ctx context.Context, tx *sql.Tx, gk string, version int64) error {
	var v int64
	err := tx.QueryRowContext(ctx, s.q(`SELECT VERSION FROM {G} WHERE GROUP_KEY = ? AND REGION = ?`), gk, s.region).Scan(&v)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return groupstore.ErrNotFound
	case err != nil:
		return err
	}
	return fmt.Errorf("version %d, not %d: %w", v, version, groupstore.ErrConflict)
}

// Update implements [groupstore.Store.Update].
func (s *GroupStore) Update(ctx context.Context, key string, u groupstore.Update) error {
	if err := s.inTx(ctx, func(tx *sql.Tx) error { return s.update(ctx, tx, key, u) }); err != nil {
		return s.wrapGroup(ctx, "jdbc: group update "+quote(key), err)
	}
	return nil
}

// update applies u to the group of key in tx.
func (s *GroupStore) update(ctx context.Context, tx *sql.Tx, key string, u groupstore.Update) error {
	gk := groupKeyOf(key)
	release := u.ReleaseAll || len(u.Release) > 0
	set := `VERSION = VERSION + 1, UPDATED_DATE = {NOW}`
	var args []any
	if release {
		set += `, RELEASES = RELEASES + 1, MESSAGE_COUNT = (SELECT COUNT(*) FROM {M} m WHERE m.GROUP_KEY = ? AND m.REGION = ? AND m.RELEASED = 0)`
		args = append(args, gk, s.region)
	}
	if u.Complete {
		set += `, COMPLETE = 1`
	}
	if u.SetLastReleasedSequence {
		set += `, LAST_RELEASED_SEQUENCE = ?`
		args = append(args, u.LastReleasedSequence)
	}
	switch {
	case u.Timeout > 0:
		set += `, DUE_AT = {PLUS}, CLAIMED_UNTIL = NULL`
		args = append(args, micros(u.Timeout))
	case u.ClearTimeout:
		set += `, DUE_AT = NULL, CLAIMED_UNTIL = NULL`
	}
	where := ` WHERE GROUP_KEY = ? AND REGION = ?`
	args = append(args, gk, s.region)
	if u.IfVersion != 0 {
		where += ` AND VERSION = ?`
		args = append(args, u.IfVersion)
	}
	if release {
		rel := `UPDATE {M} SET RELEASED = 1, METADATA = NULL, PAYLOAD = NULL WHERE GROUP_KEY = ? AND REGION = ? AND RELEASED = 0`
		rargs := []any{gk, s.region}
		if !u.ReleaseAll {
			rel += ` AND MESSAGE_KEY IN (?` + strings.Repeat(`, ?`, len(u.Release)-1) + `)`
			for _, id := range u.Release {
				rargs = append(rargs, messageKeyOf(id))
			}
		}
		if _, err := tx.ExecContext(ctx, s.q(rel), rargs...); err != nil {
			return err
		}
	}
	res, err := tx.ExecContext(ctx, s.q(`UPDATE {G} SET `+set+where), args...)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n == 0 {
		return s.missingOrConflict(ctx, tx, gk, u.IfVersion)
	}
	return nil
}

// Remove implements [groupstore.Store.Remove].
func (s *GroupStore) Remove(ctx context.Context, key string, version int64) error {
	what := "jdbc: group remove " + quote(key)
	gk := groupKeyOf(key)
	del := `DELETE FROM {G} WHERE GROUP_KEY = ? AND REGION = ?`
	args := []any{gk, s.region}
	if version != 0 {
		del += ` AND VERSION = ?`
		args = append(args, version)
	}
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, s.q(del), args...)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return s.missingOrConflict(ctx, tx, gk, version)
		}
		_, err = tx.ExecContext(ctx, s.q(`DELETE FROM {M} WHERE GROUP_KEY = ? AND REGION = ?`), gk, s.region)
		return err
	})
	if err != nil {
		return s.wrapGroup(ctx, what, err)
	}
	return nil
}

const dueCondition = `DUE_AT <= {NOW} AND (CLAIMED_UNTIL IS NULL OR CLAIMED_UNTIL <= {NOW})`

// ClaimDue implements [groupstore.Store.ClaimDue].
func (s *GroupStore) ClaimDue(ctx context.Context, limit int, lease time.Duration) ([]groupstore.DueGroup, error) {
	const what = "jdbc: group claim due"
	if limit <= 0 {
		return nil, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	type due struct {
		claim groupstore.DueGroup
		gk    string
		at    time.Time
	}
	var claims []due
	scan := func(rows *sql.Rows) error {
		defer rows.Close()
		for rows.Next() {
			var (
				d  due
				at any
			)
			if err := rows.Scan(&d.claim.Key, &d.gk, &d.claim.Version, &at); err != nil {
				return err
			}
			var err error
			if d.at, err = dialect.ScanTime(at); err != nil {
				return err
			}
			claims = append(claims, d)
		}
		return rows.Err()
	}
	if s.dialect == Postgres {
		rows, err := s.db.QueryContext(ctx, s.q(`UPDATE {G} SET CLAIMED_UNTIL = {PLUS} WHERE (GROUP_KEY, REGION) IN (`+
			`SELECT GROUP_KEY, REGION FROM {G} WHERE REGION = ? AND `+dueCondition+` ORDER BY DUE_AT LIMIT ? FOR UPDATE SKIP LOCKED) `+
			`RETURNING CORRELATION_KEY, GROUP_KEY, VERSION, DUE_AT`), micros(lease), s.region, limit)
		if err == nil {
			err = scan(rows)
		}
		if err != nil {
			return nil, s.wrapGroup(ctx, what, err)
		}
		slices.SortFunc(claims, func(a, b due) int { return a.at.Compare(b.at) })
	} else {
		rows, err := s.db.QueryContext(ctx, s.q(`SELECT CORRELATION_KEY, GROUP_KEY, VERSION, DUE_AT FROM {G} `+
			`WHERE REGION = ? AND `+dueCondition+` ORDER BY DUE_AT LIMIT ?`), s.region, limit)
		if err == nil {
			err = scan(rows)
		}
		if err != nil {
			return nil, s.wrapGroup(ctx, what, err)
		}
		won := claims[:0]
		for _, d := range claims {
			res, err := s.db.ExecContext(ctx, s.q(`UPDATE {G} SET CLAIMED_UNTIL = {PLUS} `+
				`WHERE GROUP_KEY = ? AND REGION = ? AND VERSION = ? AND `+dueCondition), micros(lease), d.gk, s.region, d.claim.Version)
			if err != nil {
				return nil, s.wrapGroup(ctx, what, err)
			}
			if n, err := res.RowsAffected(); err != nil {
				return nil, s.wrapGroup(ctx, what, err)
			} else if n == 1 {
				won = append(won, d)
			}
		}
		claims = won
	}
	out := make([]groupstore.DueGroup, len(claims))
	for i, d := range claims {
		out[i] = d.claim
	}
	return out, nil
}

// inList returns "(?, ?, ...)" for n values.
func inList(n int) string {
	return "(?" + strings.Repeat(", ?", n-1) + ")"
}

package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/lockreg/lockreg/groupstore"
	"github.com/lockreg/lockreg/internal/dialect"
)

var _ groupstore.Locker = (*Store)(nil)

// Locked implements [groupstore.Locker]: fn runs in one transaction that
// holds the row lock of the group of key, on PostgreSQL and MySQL a
// SELECT ... FOR UPDATE of its row, on SQLite the database's write lock.
// The lock is taken by the first call of fn's store on the group: an Add
// takes it with its own first statement, any other call with a statement
// of its own first. It is held until the transaction ends, and it
// excludes every other Locked call on the group and every Add to it, in
// any process on the same tables; a Get outside Locked does not wait.
// Nothing of fn's calls is visible to others before fn returns nil and the
// transaction commits; an error from fn rolls all of them back and is
// returned as it is. A transaction that fails with a deadlock, a
// serialization failure or SQLITE_BUSY runs fn again, up to 5 times in
// all, so fn must be safe to repeat (the handlers' steps are). Calls of
// fn's store on other groups run in the same transaction without their
// lock. fn's store must not be used after fn returns. Round trips: BEGIN,
// COMMIT, and fn's statements, one more if its first call is not an Add
// (on PostgreSQL, none more for a Get either: one statement locks the row
// and reads the group, and reads it again only if a change committed
// while it waited for the lock). On PostgreSQL an Update that releases
// messages is one statement in fn, which holds the lock, so a handler's
// release (Get, Update) is BEGIN, 2 statements and COMMIT.
func (s *Store) Locked(ctx context.Context, key string, fn func(context.Context, groupstore.Store) error) error {
	return s.locked(ctx, key, fn, nil)
}

// locked is Locked; with ob, fn's store is an Outbox publishing through
// ob's publisher.
func (s *Store) locked(ctx context.Context, key string, fn func(context.Context, groupstore.Store) error, ob *Outbox) error {
	s.gate.enter(key) // this process's Adds to the group wait without a connection
	defer s.gate.leave(key)
	var fnErr error
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		t := &txStore{s: s, tx: tx, key: key}
		var st groupstore.Store = t
		if ob != nil {
			st = txOutbox{t, ob}
		}
		fnErr = fn(ctx, st)
		return fnErr
	})
	switch {
	case err == nil:
		return nil
	case fnErr != nil && errors.Is(err, fnErr):
		return err // fn's own, already described
	}
	return s.wrap(ctx, "sqlstore: locked "+dialect.Quote(key), err)
}

// txStore is the store of one Locked call: its calls run in tx, and the
// first one on the locked group takes its row lock.
type txStore struct {
	s      *Store
	tx     *sql.Tx
	key    string
	locked bool
}

// lock takes the row lock of the group of key if it is the locked group
// and no call has taken it yet.
func (t *txStore) lock(ctx context.Context, key string) error {
	if t.locked || key != t.key {
		return nil
	}
	q := t.s.sql.lockRow
	var err error
	if strings.HasPrefix(q.SQL, "SELECT") { // read its row, if any, so that the connection is free again
		var version int64
		if err = t.tx.QueryRowContext(ctx, q.SQL, t.s.values(key).args(q)...).Scan(&version); errors.Is(err, sql.ErrNoRows) {
			err = nil // no group: nothing to lock
		}
	} else {
		_, err = t.tx.ExecContext(ctx, q.SQL, t.s.values(key).args(q)...)
	}
	if err != nil {
		return t.s.wrap(ctx, "sqlstore: locking "+dialect.Quote(key), err)
	}
	t.locked = true
	return nil
}

func (t *txStore) Add(ctx context.Context, key string, msg groupstore.Message, timeout time.Duration) (groupstore.Group, groupstore.Outcome, error) {
	g, o, _, err := t.s.add(ctx, t.tx, key, msg, timeout, nil)
	if err == nil && key == t.key {
		t.locked = true // its first statement locked the row
	}
	return g, o, err
}

func (t *txStore) Get(ctx context.Context, key string) (groupstore.Group, error) {
	if q := t.s.sql.lockGet; q.SQL != "" && !t.locked && key == t.key {
		// One statement locks and reads, unless a change committed while
		// it waited for the lock: its snapshot missed that, so read again.
		g, locked, err := t.s.read(ctx, t.tx, q, true, key)
		if err != nil && !errors.Is(err, groupstore.ErrNotFound) {
			return g, err
		}
		t.locked = true // or no group: nothing to lock, as in lock
		if err != nil || locked == g.Version {
			return g, err
		}
		return t.s.get(ctx, t.tx, key)
	}
	if err := t.lock(ctx, key); err != nil {
		return groupstore.Group{}, err
	}
	return t.s.get(ctx, t.tx, key)
}

func (t *txStore) Update(ctx context.Context, key string, u groupstore.Update) error {
	if err := t.lock(ctx, key); err != nil {
		return err
	}
	if err := t.s.update(ctx, t.tx, key, u, key == t.key); err != nil {
		return t.s.wrap(ctx, "sqlstore: update "+dialect.Quote(key), err)
	}
	return nil
}

func (t *txStore) Remove(ctx context.Context, key string, version int64) error {
	if err := t.lock(ctx, key); err != nil {
		return err
	}
	v, del := t.s.removal(key, version)
	if err := t.s.remove(ctx, t.tx, v, del); err != nil {
		return t.s.wrap(ctx, "sqlstore: remove "+dialect.Quote(key), err)
	}
	return nil
}

// ClaimDue claims outside the transaction, as the store does: a claim is
// not the group lock.
func (t *txStore) ClaimDue(ctx context.Context, limit int, lease time.Duration) ([]groupstore.DueGroup, error) {
	return t.s.ClaimDue(ctx, limit, lease)
}

// txOutbox is the store of a Locked call of an Outbox.
type txOutbox struct {
	*txStore
	ob *Outbox
}

func (t txOutbox) UpdatePublish(ctx context.Context, key string, u groupstore.Update, topic string, msgs ...*message.Message) error {
	if err := t.lock(ctx, key); err != nil {
		return err
	}
	if err := t.ob.updatePublish(ctx, t.tx, key, u, key == t.key, topic, msgs); err != nil {
		return t.s.wrap(ctx, "sqlstore: update and publish "+dialect.Quote(key), err)
	}
	return nil
}

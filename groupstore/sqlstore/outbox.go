package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/lockreg/lockreg/groupstore"
	"github.com/lockreg/lockreg/internal/dialect"
)

// Outbox is a [Store] that also publishes in its own transactions: it
// implements [groupstore.Outbox], so an aggregator or resequencer whose
// store it is commits each release and its output together. With a
// watermill-sql publisher on the store's database, each output reaches its
// topic exactly once. Make one with NewOutbox; it is safe for concurrent use.
type Outbox struct {
	*Store
	newPublisher func(*sql.Tx) (message.Publisher, error)
}

var (
	_ groupstore.Outbox = (*Outbox)(nil)
	_ groupstore.Locker = (*Outbox)(nil)
)

// NewOutbox returns an Outbox on store that publishes with the publisher
// newPublisher makes on a transaction of the store's database. With
// watermill-sql:
//
//	outbox, err := sqlstore.NewOutbox(store, func(tx *sql.Tx) (message.Publisher, error) {
//		return wsql.NewPublisher(wsql.TxFromStdSQL(tx),
//			wsql.PublisherConfig{SchemaAdapter: wsql.DefaultPostgreSQLSchema{}}, logger)
//	})
//
// The publisher must write only through tx (watermill-sql's refuses
// AutoInitializeSchema on a transaction; create the topic's table first). It
// is made once per transaction attempt and closed after it.
func NewOutbox(store *Store, newPublisher func(tx *sql.Tx) (message.Publisher, error)) (*Outbox, error) {
	if store == nil {
		return nil, errors.New("sqlstore: outbox: nil store")
	}
	if newPublisher == nil {
		return nil, errors.New("sqlstore: outbox: nil publisher function")
	}
	return &Outbox{Store: store, newPublisher: newPublisher}, nil
}

// UpdatePublish implements [groupstore.Outbox.UpdatePublish]: one
// transaction of the statements of Update and the publisher's. A transient
// failure retries the whole transaction, publish included, as Update does.
func (o *Outbox) UpdatePublish(ctx context.Context, key string, u groupstore.Update, topic string, msgs ...*message.Message) error {
	err := o.inTx(ctx, func(tx *sql.Tx) error { return o.updatePublish(ctx, tx, key, u, false, topic, msgs) })
	if err != nil {
		return o.wrap(ctx, "sqlstore: update and publish "+dialect.Quote(key), err)
	}
	return nil
}

// updatePublish is UpdatePublish in tx; held as for update.
func (o *Outbox) updatePublish(ctx context.Context, tx *sql.Tx, key string, u groupstore.Update, held bool,
	topic string, msgs []*message.Message) error {
	if err := o.update(ctx, tx, key, u, held); err != nil {
		return err
	}
	p, err := o.newPublisher(tx)
	if err != nil {
		return fmt.Errorf("making the publisher: %w", err)
	}
	err = p.Publish(topic, msgs...)
	p.Close() // it wrote through tx; nothing of it outlives the transaction
	if err != nil {
		return fmt.Errorf("publishing %d message(s) to %q: %w", len(msgs), topic, err)
	}
	return nil
}

// Locked implements [groupstore.Locker] as [Store.Locked] does; the store
// fn gets is also a [groupstore.Outbox], whose UpdatePublish runs in the
// same transaction.
func (o *Outbox) Locked(ctx context.Context, key string, fn func(context.Context, groupstore.Store) error) error {
	return o.locked(ctx, key, fn, o)
}

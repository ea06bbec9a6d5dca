package testdb

import (
	"context"
	"database/sql"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
)

// outboxTable holds what RowPublishers publish.
const outboxTable = "outbox_test_messages"

// rowPublisher publishes by inserting (region, topic, uuid) rows through
// the transaction it was made on, as a SQL pub/sub's publisher does.
type rowPublisher struct {
	b      Backend
	tx     *sql.Tx
	region string
	fail   error // returned after the insert
}

func (p rowPublisher) Publish(topic string, msgs ...*message.Message) error {
	for _, m := range msgs {
		if _, err := p.tx.ExecContext(m.Context(), p.b.Q(`INSERT INTO `+outboxTable+` (region, topic, uuid) VALUES (?, ?, ?)`),
			p.region, topic, m.UUID); err != nil {
			return err
		}
	}
	return p.fail
}

func (rowPublisher) Close() error { return nil }

// RowPublishers returns, for sqlstore.NewOutbox, a function making
// publishers on a transaction that insert a row per message, tagged with
// region, and then fail with fail when it is not nil; Published reads the
// rows. The rows of region are deleted when t ends.
func (b Backend) RowPublishers(t testing.TB, region string, fail error) func(tx *sql.Tx) (message.Publisher, error) {
	t.Helper()
	b.Exec(t, `CREATE TABLE IF NOT EXISTS `+outboxTable+` (region VARCHAR(100) NOT NULL, topic VARCHAR(100) NOT NULL, uuid VARCHAR(100) NOT NULL)`)
	t.Cleanup(func() { b.DB.Exec(b.Q(`DELETE FROM `+outboxTable+` WHERE region = ?`), region) })
	return func(tx *sql.Tx) (message.Publisher, error) {
		return rowPublisher{b: b, tx: tx, region: region, fail: fail}, nil
	}
}

// Published returns the UUIDs that RowPublishers published to topic in
// region.
func (b Backend) Published(t testing.TB, region, topic string) []string {
	t.Helper()
	rows, err := b.DB.QueryContext(context.Background(), b.Q(`SELECT uuid FROM `+outboxTable+` WHERE region = ? AND topic = ?`), region, topic)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return ids
}

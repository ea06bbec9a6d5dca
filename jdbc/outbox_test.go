package jdbc_test

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/lockreg/lockreg/aggregator"
	"github.com/lockreg/lockreg/groupstore"
	"github.com/lockreg/lockreg/jdbc"
	"github.com/lockreg/lockreg/resequencer"
)

const outboxTable = "outbox_test_messages"

// rowPublisher publishes by inserting (region, topic, uuid) rows through
// the transaction it was made on, as a SQL pub/sub's publisher does.
type rowPublisher struct {
	db     testDB
	tx     *sql.Tx
	region string
	fail   error // returned after the insert
}

func (p rowPublisher) Publish(topic string, msgs ...*message.Message) error {
	for _, m := range msgs {
		if _, err := p.tx.ExecContext(m.Context(), p.db.q(`INSERT INTO `+outboxTable+` (region, topic, uuid) VALUES (?, ?, ?)`),
			p.region, topic, m.UUID); err != nil {
			return err
		}
	}
	return p.fail
}

func (rowPublisher) Close() error { return nil }

// newOutbox returns an outbox in a region of its own on db whose publisher
// inserts rows, failing with fail (when not nil) after inserting them.
func newOutbox(t *testing.T, db testDB, fail error) (*jdbc.Outbox, string) {
	t.Helper()
	db.exec(t, `CREATE TABLE IF NOT EXISTS `+outboxTable+` (region VARCHAR(100) NOT NULL, topic VARCHAR(100) NOT NULL, uuid VARCHAR(100) NOT NULL)`)
	region := randomRegion()
	store, err := jdbc.NewGroupStore(db.DB, jdbc.WithRegion(region))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close(context.Background()) })
	ob, err := jdbc.NewOutbox(store, func(tx *sql.Tx) (message.Publisher, error) {
		return rowPublisher{db: db, tx: tx, region: region, fail: fail}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.DB.Exec(db.q(`DELETE FROM `+outboxTable+` WHERE region = ?`), region) })
	return ob, region
}

// newOutboxGroup returns newOutbox's outbox and region, and the group "k"
// it holds with one message.
func newOutboxGroup(t *testing.T, db testDB, fail error) (*jdbc.Outbox, string, groupstore.Group) {
	t.Helper()
	ob, region := newOutbox(t, db, fail)
	g, _, err := ob.Add(context.Background(), "k", groupstore.Message{UUID: "m1"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	return ob, region, g
}

// published returns the UUIDs published to topic in region.
func published(t *testing.T, db testDB, region, topic string) []string {
	t.Helper()
	rows, err := db.DB.Query(db.q(`SELECT uuid FROM `+outboxTable+` WHERE region = ? AND topic = ?`), region, topic)
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

func TestOutboxCommitsTheUpdateAndThePublishTogether(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		ob, region, g := newOutboxGroup(t, db, nil)
		err := ob.UpdatePublish(context.Background(), "k", groupstore.Update{IfVersion: g.Version, ReleaseAll: true, Complete: true},
			"out", message.NewMessage("o1", nil))
		if err != nil {
			t.Fatalf("UpdatePublish: %v", err)
		}
		if got := published(t, db, region, "out"); len(got) != 1 || got[0] != "o1" {
			t.Errorf("published %v, want [o1]", got)
		}
		after, err := ob.Get(context.Background(), "k")
		if err != nil {
			t.Fatal(err)
		}
		if !after.Complete || after.Size != 0 || after.Version != g.Version+1 {
			t.Errorf("group after UpdatePublish: complete %v, size %d, version %d", after.Complete, after.Size, after.Version)
		}
	})
}

func TestOutboxPublishFailureLeavesTheGroupUnchanged(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		broker := errors.New("broker refused")
		ob, region, g := newOutboxGroup(t, db, broker)
		err := ob.UpdatePublish(context.Background(), "k", groupstore.Update{IfVersion: g.Version, ReleaseAll: true, Complete: true},
			"out", message.NewMessage("o1", nil))
		if !errors.Is(err, broker) {
			t.Fatalf("UpdatePublish = %v, want the publisher's error", err)
		}
		if got := published(t, db, region, "out"); len(got) != 0 {
			t.Errorf("published %v after a failed publish, want nothing", got)
		}
		after, err := ob.Get(context.Background(), "k")
		if err != nil {
			t.Fatal(err)
		}
		if after.Complete || after.Size != 1 || after.Version != g.Version {
			t.Errorf("group after a failed publish: complete %v, size %d, version %d; want it unchanged",
				after.Complete, after.Size, after.Version)
		}
	})
}

func TestOutboxVersionConflictPublishesNothing(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		ob, region, g := newOutboxGroup(t, db, nil)
		err := ob.UpdatePublish(context.Background(), "k", groupstore.Update{IfVersion: g.Version + 1, Complete: true},
			"out", message.NewMessage("o1", nil))
		if !errors.Is(err, groupstore.ErrConflict) {
			t.Fatalf("UpdatePublish with a stale version = %v, want ErrConflict", err)
		}
		if got := published(t, db, region, "out"); len(got) != 0 {
			t.Errorf("published %v on a conflict, want nothing", got)
		}
	})
}

func TestNewOutboxRejectsMissingParts(t *testing.T) {
	db := testDatabases(t)[3] // sqlite
	store := newGroupStore(t, db)
	if _, err := jdbc.NewOutbox(nil, func(*sql.Tx) (message.Publisher, error) { return nil, nil }); err == nil {
		t.Error("nil store accepted")
	}
	if _, err := jdbc.NewOutbox(store, nil); err == nil {
		t.Error("nil publisher function accepted")
	}
}

// An aggregator whose store is an outbox on PostgreSQL publishes into a
// watermill-sql topic in the transaction that completes the group: a
// release whose publish fails leaves nothing behind, the redelivery
// releases again, and the topic ends with the output exactly once,
// although the input was delivered three times.
func TestAggregatorWithAnOutboxPublishesEachOutputExactlyOnceIntoAWatermillSQLTopic(t *testing.T) {
	var pg testDB
	for _, db := range testDatabases(t) {
		if db.Name == "postgres-pgx" {
			pg = db
		}
	}
	pg.require(t)
	ctx := context.Background()
	schema := wsql.DefaultPostgreSQLSchema{}
	topic := "lockreg_outbox_" + strings.ReplaceAll(randomRegion()[5:13], "-", "")
	// A publisher on a transaction may not create the topic's table.
	queries, err := schema.SchemaInitializingQueries(wsql.SchemaInitializingQueriesParams{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range queries {
		if _, err := pg.DB.Exec(q.Query, q.Args...); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { pg.DB.Exec(`DROP TABLE IF EXISTS ` + schema.MessagesTable(topic)) })

	store, err := jdbc.NewGroupStore(pg.DB, jdbc.WithRegion(randomRegion()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close(context.Background()) })
	var attempts atomic.Int64
	broker := errors.New("first attempt fails")
	ob, err := jdbc.NewOutbox(store, func(tx *sql.Tx) (message.Publisher, error) {
		p, err := wsql.NewPublisher(wsql.TxFromStdSQL(tx), wsql.PublisherConfig{SchemaAdapter: schema}, watermill.NopLogger{})
		if err != nil {
			return nil, err
		}
		if attempts.Add(1) == 1 {
			return failingAfter{p, broker}, nil
		}
		return p, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	agg, err := aggregator.New(aggregator.Config{OutputTopic: topic, Store: ob, Logger: watermill.NopLogger{}})
	if err != nil {
		t.Fatalf("an aggregator on an outbox needs no Publisher: %v", err)
	}
	handle := func(m *message.Message) error { m.SetContext(ctx); return agg.Handle(m) }
	if err := handle(orderLine("o", 1, 2)); err != nil {
		t.Fatal(err)
	}
	if err := handle(orderLine("o", 2, 2)); !errors.Is(err, broker) {
		t.Fatalf("release with a failing publish = %v, want its error", err)
	}
	for range 2 { // the redelivery, then a duplicate of it
		if err := handle(orderLine("o", 2, 2)); err != nil {
			t.Fatal(err)
		}
	}
	var rows int
	if err := pg.DB.QueryRow(`SELECT count(*) FROM ` + schema.MessagesTable(topic)).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 1 {
		t.Errorf("the topic holds %d outputs, want exactly 1", rows)
	}
}

// failingAfter publishes, then fails, as a publisher whose insert went
// through but whose caller gave up.
type failingAfter struct {
	message.Publisher
	err error
}

func (f failingAfter) Publish(topic string, msgs ...*message.Message) error {
	if err := f.Publisher.Publish(topic, msgs...); err != nil {
		return err
	}
	return f.err
}

// A resequencer whose store is an outbox publishes each released run in
// the transaction that records it: every message once, redeliveries
// included.
func TestResequencerWithAnOutboxPublishesEachMessageOnce(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		ctx := context.Background()
		ob, region := newOutbox(t, db, nil)
		rs, err := resequencer.New(resequencer.Config{OutputTopic: "out", Store: ob, ReleasePartialSequences: true,
			Logger: watermill.NopLogger{}})
		if err != nil {
			t.Fatalf("a resequencer on an outbox needs no Publisher: %v", err)
		}
		for _, seq := range []int{2, 1, 1, 3, 2} {
			m := orderLine("k", seq, 3)
			m.Metadata.Set("sequence_number", strconv.Itoa(seq))
			m.SetContext(ctx)
			if err := rs.Handle(m); err != nil {
				t.Fatal(err)
			}
		}
		if got := published(t, db, region, "out"); len(got) != 3 {
			t.Errorf("published %d messages, want 3", len(got))
		}
	})
}

package aggregator_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/lockreg/lockreg/aggregator"
	"github.com/lockreg/lockreg/groupstore/sqlstore"
	"github.com/lockreg/lockreg/internal/testdb"
)

// An aggregator whose store is an outbox on PostgreSQL publishes into a
// watermill-sql topic in the transaction that completes the group: a
// release whose publish fails leaves nothing behind, the redelivery
// releases again, and the topic ends with the output exactly once,
// although the input was delivered three times.
func TestAggregatorWithAnOutboxPublishesEachOutputExactlyOnceIntoAWatermillSQLTopic(t *testing.T) {
	pg := testdb.Postgres(t)
	ctx := context.Background()
	schema := wsql.DefaultPostgreSQLSchema{}
	topic := "lockreg_outbox_" + strings.ReplaceAll(testdb.RandomRegion()[5:13], "-", "")
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

	store, err := sqlstore.New(pg.DB, sqlstore.Config{Region: testdb.RandomRegion()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close(context.Background()) })
	var attempts atomic.Int64
	broker := errors.New("first attempt fails")
	ob, err := sqlstore.NewOutbox(store, func(tx *sql.Tx) (message.Publisher, error) {
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
	if err := handle(part("o", 1, 2)); err != nil {
		t.Fatal(err)
	}
	if err := handle(part("o", 2, 2)); !errors.Is(err, broker) {
		t.Fatalf("release with a failing publish = %v, want its error", err)
	}
	for range 2 { // the redelivery, then a duplicate of it
		if err := handle(part("o", 2, 2)); err != nil {
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

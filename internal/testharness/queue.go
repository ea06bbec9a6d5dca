package testharness

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/lockreg/lockreg/groupstore"
	"github.com/lockreg/lockreg/groupstore/sqlstore"
)

// queueSchema is watermill-sql's PostgreSQLQueueSchema made fit for
// competing consumers. The tests need several routers, in several
// processes, taking messages of one topic at the same time, each message
// delivered to one of them and redelivered to another if its consumer dies.
// watermill-sql v4.1.2 offers two ways, and neither does that as it is:
//
//   - the default schema with one consumer group: every subscriber of the
//     group locks the group's row in the offsets table (SELECT ... FOR
//     UPDATE) for the whole of its batch, so the consumers take turns and
//     one batch is handled at a time in the whole cluster;
//   - PostgreSQLQueueSchema with PostgreSQLQueueOffsetsAdapter (no
//     consumer groups; each message row is acked or deleted on its own): it
//     selects the first unacked rows with a plain FOR UPDATE under
//     REPEATABLE READ, so a second consumer blocks on the first one's batch
//     and then fails with a serialization error once that batch is acked.
//
// queueSchema keeps the queue schema's table and queries but selects with
// FOR UPDATE SKIP LOCKED under READ COMMITTED, the usual SQL job queue: each
// consumer takes the first rows nobody holds, a row acked meanwhile is
// skipped, and a dead consumer's rows are unlocked when PostgreSQL drops
// its connection, and taken by another. Acked rows are deleted
// (DeleteOnAck), so the input table is empty once every delivery was
// acked, and the select does not step over acked rows.
//
// One hazard of watermill-sql v4.1.2 stays: when a delivery of a batch ends
// without an ack because the subscriber is closing or the ack deadline
// (30 s) passed, the subscriber still acks the batch, and the queue
// offsets adapter then deletes every row of it, those not yet delivered
// included. So the handlers' lock timeout stays far below the ack
// deadline, and the tests stop the routers only once every delivery was
// acked.
type queueSchema struct {
	wsql.PostgreSQLQueueSchema
}

func newQueueSchema(batchSize int) queueSchema {
	return queueSchema{wsql.PostgreSQLQueueSchema{SubscribeBatchSize: batchSize}}
}

// queueOffsets is the offsets adapter of queueSchema.
var queueOffsets = wsql.PostgreSQLQueueOffsetsAdapter{DeleteOnAck: true}

// SelectQuery is the queue schema's select with SKIP LOCKED.
func (s queueSchema) SelectQuery(p wsql.SelectQueryParams) (wsql.Query, error) {
	q, err := s.PostgreSQLQueueSchema.SelectQuery(p)
	if err != nil {
		return q, err
	}
	trimmed := strings.TrimRight(q.Query, " \t\n")
	if !strings.HasSuffix(trimmed, "FOR UPDATE") {
		return q, fmt.Errorf("clustertest: the queue schema's select no longer ends with FOR UPDATE: %s", q.Query)
	}
	q.Query = trimmed + " SKIP LOCKED"
	return q, nil
}

// SubscribeIsolationLevel is READ COMMITTED: under REPEATABLE READ, a row
// that another consumer acked after this transaction's snapshot fails the
// lock with a serialization error instead of being skipped.
func (s queueSchema) SubscribeIsolationLevel() sql.IsolationLevel { return sql.LevelReadCommitted }

// subscriberConfig is the configuration of every subscriber of the input
// topic. A nacked message (a lock timeout, a conflict) is sent again after
// ResendInterval; an empty poll waits PollInterval.
func subscriberConfig(schema queueSchema) wsql.SubscriberConfig {
	return wsql.SubscriberConfig{
		SchemaAdapter:  schema,
		OffsetsAdapter: queueOffsets,
		PollInterval:   50 * time.Millisecond,
		ResendInterval: 50 * time.Millisecond,
		RetryInterval:  100 * time.Millisecond,
	}
}

// createTopic creates the table of topic.
func createTopic(ctx context.Context, db *sql.DB, schema queueSchema, topic string) error {
	queries, err := schema.SchemaInitializingQueries(wsql.SchemaInitializingQueriesParams{Topic: topic})
	if err != nil {
		return err
	}
	for _, q := range queries {
		if _, err := db.ExecContext(ctx, q.Query, q.Args...); err != nil {
			return fmt.Errorf("creating topic %s: %w", topic, err)
		}
	}
	return nil
}

// transactionalOutput makes the children's group store a sqlstore.Outbox, so
// that the handlers publish each release in the transaction that records
// it, and the tests demand exactly one output row per release. Without it
// (false) the store is a plain sqlstore.Store, the handlers publish with
// the router's publisher before recording a release, and a release
// interrupted in between (the killed child) is published again with the
// same UUIDs: the tests then count and log those repeats.
const transactionalOutput = true

// newStore returns a child's group store, as transactionalOutput says.
func newStore(db *sql.DB, region string, schema queueSchema, logger watermill.LoggerAdapter) (groupstore.Store, error) {
	store, err := sqlstore.New(db, sqlstore.Config{Region: region})
	if err != nil {
		return nil, err
	}
	if !transactionalOutput {
		return store, nil
	}
	return sqlstore.NewOutbox(store, func(tx *sql.Tx) (message.Publisher, error) {
		return wsql.NewPublisher(wsql.TxFromStdSQL(tx), wsql.PublisherConfig{SchemaAdapter: schema}, logger)
	})
}

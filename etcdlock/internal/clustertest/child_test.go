package clustertest

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/lockreg/lockreg/aggregator"
	"github.com/lockreg/lockreg/groupstore"
	"github.com/lockreg/lockreg/groupstore/sqlstore"
	"github.com/lockreg/lockreg/registry"
	"github.com/lockreg/lockreg/resequencer"
)

// A child process is the test binary run with childEnv set to its
// childConfig in JSON; TestMain then calls childMain instead of the tests.
// The child runs one router until its standard input closes (the parent
// stops it, or the parent died) or it gets SIGTERM, and reports on
// standard output in lines that start with reportPrefix:
//
//	clustertest ready outbox=false
//	clustertest stats handled=N failed=N lockerrors=N
//	clustertest final handled=N failed=N lockerrors=N
//
// handled counts handler calls that returned nil (the message was acked),
// failed those that returned an error (the message was nacked and is
// redelivered), lockerrors the errors the registry reported.
const (
	childEnv     = "LOCKREG_CLUSTERTEST_CHILD"
	reportPrefix = "clustertest "
)

// The handlers the children run.
const (
	kindAggregator  = "aggregator"
	kindResequencer = "resequencer"
	kindPerKey      = "perkey" // perkey_test.go
)

// The children's lock settings: leases of a killed child expire within
// lockTTL; a handler waits at most lockTimeout for a group lock and then
// fails, so that its message is nacked and redelivered long before the
// subscriber's ack deadline (30 s).
const (
	lockTTL     = 2 * time.Second
	lockTimeout = 3 * time.Second
)

// childConfig configures a child process.
type childConfig struct {
	Kind      string // kindAggregator or kindResequencer
	Index     int
	DSN       string
	Region    string
	Input     string // topics
	Output    string
	Discard   string
	Handlers  int // consumer handlers in the router, each with a subscriber of its own
	BatchSize int // the subscribers' SubscribeBatchSize
	// StoreLocks leaves the handlers' Locks nil: the store locks groups.
	StoreLocks bool
	// Endpoints are the etcd cluster's, where the locks are.
	Endpoints []string
}

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

// childMain runs a child process and returns its exit code.
func childMain(raw string) int {
	var cfg childConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		fmt.Fprintf(os.Stderr, "clustertest child: bad %s: %v\n", childEnv, err)
		return 2
	}
	if err := runChild(cfg); err != nil {
		fmt.Fprintf(os.Stderr, "clustertest child %d: %v\n", cfg.Index, err)
		return 1
	}
	return 0
}

// childCounters are a child's figures.
type childCounters struct {
	handled, failed, lockErrors atomic.Int64
}

func (c *childCounters) String() string {
	return fmt.Sprintf("handled=%d failed=%d lockerrors=%d", c.handled.Load(), c.failed.Load(), c.lockErrors.Load())
}

// runChild runs the router of one child until it is told to stop.
func runChild(cfg childConfig) error {
	if cfg.Kind == kindPerKey {
		return runPerKeyChild(cfg)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		// EOF: the parent stops this child, or has died.
		io.Copy(io.Discard, os.Stdin)
		cancel()
	}()

	logger := watermill.NewSlogLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	var counters childCounters

	db, err := sql.Open("pgx", cfg.DSN)
	if err != nil {
		return err
	}
	defer db.Close()
	// Each handler's subscriber holds a connection for its batch's
	// transaction while the handler uses another. Idle connections are
	// kept: by default database/sql keeps two, and opening a PostgreSQL
	// connection for every other statement would cost more than the
	// statements.
	// With the store's group locks (StoreLocks) a handler's step holds a
	// connection for its transaction while it publishes discards through
	// the router's publisher on another: one more per handler.
	conns := 2*cfg.Handlers + 2
	if cfg.StoreLocks {
		conns += cfg.Handlers
	}
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)

	clientID := fmt.Sprintf("clustertest-%d-%s", cfg.Index, uuid.NewString()[:8])
	repo, closeRepo, err := newEtcdRepository(cfg.Endpoints, cfg.Region, clientID)
	if err != nil {
		return err
	}
	defer closeRepo()
	var errMu sync.Mutex
	locks, err := registry.New(repo, registry.WithTTL(lockTTL), registry.WithKeepAlive(),
		registry.WithIdleBetweenTries(20*time.Millisecond),
		registry.WithErrorHandler(func(key string, err error) {
			if counters.lockErrors.Add(1) <= 20 {
				errMu.Lock()
				fmt.Fprintf(os.Stderr, "clustertest child %d: lock %s: %v\n", cfg.Index, key, err)
				errMu.Unlock()
			}
		}))
	if err != nil {
		return err
	}
	defer locks.Close(context.Background())

	schema := newQueueSchema(cfg.BatchSize)
	store, err := newStore(db, cfg.Region, schema, logger)
	if err != nil {
		return err
	}
	_, isOutbox := store.(groupstore.Outbox)
	pub, err := wsql.NewPublisher(wsql.BeginnerFromStdSQL(db), wsql.PublisherConfig{SchemaAdapter: schema}, logger)
	if err != nil {
		return err
	}
	defer pub.Close()

	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 20 * time.Second}, logger)
	if err != nil {
		return err
	}
	router.AddMiddleware(func(h message.HandlerFunc) message.HandlerFunc {
		return func(m *message.Message) ([]*message.Message, error) {
			out, err := h(m)
			if err != nil {
				counters.failed.Add(1)
			} else {
				counters.handled.Add(1)
			}
			return out, err
		}
	})
	var groupLocks registry.LockRegistry = locks
	if cfg.StoreLocks {
		groupLocks = nil // the SQL store's row locks
	}
	for h := range cfg.Handlers {
		sub, err := wsql.NewSubscriber(wsql.BeginnerFromStdSQL(db), subscriberConfig(schema), logger)
		if err != nil {
			return err
		}
		name := fmt.Sprintf("%s-%d", cfg.Kind, h)
		switch cfg.Kind {
		case kindAggregator:
			a, err := aggregator.New(aggregator.Config{
				Publisher: pub, OutputTopic: cfg.Output, DiscardTopic: cfg.Discard,
				Store: store, Locks: groupLocks, LockTimeout: lockTimeout, Logger: logger,
			})
			if err != nil {
				return err
			}
			a.AddHandler(router, name, cfg.Input, sub)
		case kindResequencer:
			r, err := resequencer.New(resequencer.Config{
				Publisher: pub, OutputTopic: cfg.Output, DiscardTopic: cfg.Discard,
				Store: store, Locks: groupLocks, LockTimeout: lockTimeout, Logger: logger,
				ReleasePartialSequences: true,
			})
			if err != nil {
				return err
			}
			r.AddHandler(router, name, cfg.Input, sub)
		default:
			return fmt.Errorf("unknown kind %q", cfg.Kind)
		}
	}

	var outMu sync.Mutex
	report := func(format string, args ...any) {
		outMu.Lock()
		defer outMu.Unlock()
		fmt.Printf(reportPrefix+format+"\n", args...)
	}
	ran := make(chan error, 1)
	go func() { ran <- router.Run(ctx) }()
	select {
	case <-router.Running():
	case err := <-ran:
		return fmt.Errorf("the router stopped before running: %v", err)
	}
	report("ready outbox=%t", isOutbox)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			report("stats %s", &counters)
			continue
		case err = <-ran:
		}
		break
	}
	report("final %s", &counters)
	if err != nil {
		return fmt.Errorf("router: %w", err)
	}
	// The router closed the subscribers and stopped the timeout runners;
	// the registry gives back whatever leases are left.
	if err := locks.Close(context.Background()); err != nil {
		return fmt.Errorf("closing the registry: %w", err)
	}
	return nil
}

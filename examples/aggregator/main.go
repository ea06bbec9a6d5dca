// Command aggregator shows two instances of a service aggregating order
// lines into orders with lockreg's Watermill aggregator. The instances share
// a group store and lock table in one database; each line of an order goes
// to one instance or the other, as competing consumers would get them, and
// each order is published once, by whichever instance completes it.
//
// By default the database is an SQLite file and the transport a Watermill
// GoChannel, so no server is needed:
//
//	go run ./examples/aggregator
//
// -dsn keeps the groups and locks in PostgreSQL (through pgx) or
// MariaDB/MySQL instead. On PostgreSQL the transport is watermill-sql too:
// both instances subscribe to one topic of lines (watermill-sql's queue
// schema hands each line to one of them), and each order is published by a
// sqlstore.Outbox in the transaction that completes its group, so it reaches
// the orders topic exactly once:
//
//	go run ./examples/aggregator -dsn 'postgres://postgres@127.0.0.1:5432/test?sslmode=disable'
//
// -metrics serves lockreg's metrics (docs/observability.md lists them) on
// /metrics in Prometheus's format, through OpenTelemetry's SDK and
// Prometheus exporter, and keeps serving after the run until interrupted:
//
//	go run ./examples/aggregator -metrics 127.0.0.1:9464
//	curl -s http://127.0.0.1:9464/metrics | grep lockreg_
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
	"go.opentelemetry.io/otel/metric"
	_ "modernc.org/sqlite"

	"github.com/lockreg/lockreg/aggregator"
	"github.com/lockreg/lockreg/groupstore/sqlstore"
	"github.com/lockreg/lockreg/jdbc"
	"github.com/lockreg/lockreg/registry"
)

func main() {
	defaultFile := filepath.Join(os.TempDir(), "lockreg-aggregator.db")
	dsn := flag.String("dsn", "sqlite:"+defaultFile, "database: sqlite:FILE, postgres://... or mysql://...")
	orders := flag.Int("orders", 4, "orders to aggregate")
	metricsAddr := flag.String("metrics", "", "serve lockreg's metrics on http://ADDR/metrics (host:port) until interrupted")
	flag.Parse()
	var meters metric.MeterProvider // none: lockreg records nothing
	if *metricsAddr != "" {
		srv, err := serveMetrics(*metricsAddr)
		if err != nil {
			log.Fatal(err)
		}
		defer srv.Close(context.Background())
		meters = srv.Provider
		fmt.Printf("metrics on http://%s/metrics\n", srv.Addr)
	}
	if err := run(os.Stdout, *dsn, *orders, meters); err != nil {
		log.Fatal(err)
	}
	if *metricsAddr != "" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
		defer stop()
		fmt.Println("serving metrics until interrupted")
		<-ctx.Done()
	}
}

// run aggregates orders on dsn, printing them to out; meters, if not nil,
// records lockreg's metrics.
func run(out io.Writer, dsn string, orders int, meters metric.MeterProvider) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	db, err := open(dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	// The group tables and the lock table (which sqlstore.CreateSchema
	// creates too, as jdbc.CreateSchema does).
	if err := sqlstore.CreateSchema(ctx, db, sqlstore.Config{}); err != nil {
		return err
	}
	// A region of this run's own, so that earlier runs' groups do not count.
	region := "example-" + watermill.NewShortUUID()

	logger := watermill.NopLogger{}
	var tr transport
	if strings.HasPrefix(dsn, "postgres") {
		tr, err = sqlTransport(ctx, db, logger)
	} else {
		tr = goChannelTransport(logger)
	}
	if err != nil {
		return err
	}
	defer tr.close()
	aggregated, err := tr.orders.Subscribe(ctx, tr.ordersTopic)
	if err != nil {
		return err
	}

	// Two instances: each has its own lock repository (client id), registry,
	// store handle and router, and consumes its own share of the lines.
	for i := range 2 {
		repo, err := jdbc.NewLockRepository(ctx, db, jdbc.WithRegion(region), jdbc.WithMeterProvider(meters))
		if err != nil {
			return err
		}
		// The aggregator records its metrics with the registry's provider.
		locks, err := registry.New(repo, registry.WithMeterProvider(meters))
		if err != nil {
			return err
		}
		defer locks.Close(context.WithoutCancel(ctx))
		store, err := sqlstore.New(db, sqlstore.Config{Region: region})
		if err != nil {
			return err
		}
		defer store.Close(context.WithoutCancel(ctx)) // stops its background clean-up
		cfg := aggregator.Config{
			Publisher:    tr.publisher, // nil with an outbox: it publishes the orders
			OutputTopic:  tr.ordersTopic,
			Store:        store,
			Locks:        locks,
			GroupTimeout: 30 * time.Second,
			Logger:       logger,
		}
		if tr.outbox != nil {
			if cfg.Store, err = tr.outbox(store); err != nil {
				return err
			}
		}
		agg, err := aggregator.New(cfg)
		if err != nil {
			return err
		}
		router, err := message.NewRouter(message.RouterConfig{}, logger)
		if err != nil {
			return err
		}
		sub, err := tr.subscriber()
		if err != nil {
			return err
		}
		agg.AddHandler(router, "aggregate-orders", tr.linesTopic(i), sub)
		done := make(chan error, 1)
		go func() { done <- router.Run(ctx) }()
		defer func() { router.Close(); <-done }()
		<-router.Running()
	}

	// Three lines per order, sent out of order, alternating between the
	// instances.
	n := 0
	for line := 3; line >= 1; line-- {
		for o := 1; o <= orders; o++ {
			m := message.NewMessage(watermill.NewUUID(), fmt.Appendf(nil, `{"sku":"SKU-%d%d","qty":%d}`, o, line, line))
			m.Metadata.Set("correlation_id", "order-"+strconv.Itoa(o))
			m.Metadata.Set("sequence_number", strconv.Itoa(line))
			m.Metadata.Set("sequence_size", "3")
			if err := tr.lines.Publish(tr.linesTopic(n%2), m); err != nil {
				return err
			}
			n++
		}
	}

	var results []string
	for len(results) < orders {
		select {
		case m := <-aggregated:
			results = append(results, m.Metadata.Get("correlation_id")+": "+string(m.Payload))
			m.Ack()
		case <-ctx.Done():
			return fmt.Errorf("aggregated %d of %d orders: %w", len(results), orders, ctx.Err())
		}
	}
	slices.Sort(results)
	for _, r := range results {
		fmt.Fprintln(out, r)
	}
	return nil
}

// transport is where the lines come from and the orders go.
type transport struct {
	lines       message.Publisher                               // publishes the lines
	linesTopic  func(instance int) string                       // where to send a line for an instance
	subscriber  func() (message.Subscriber, error)              // an instance's subscriber of the lines
	publisher   message.Publisher                               // the aggregators' publisher; nil with an outbox
	outbox      func(*sqlstore.Store) (*sqlstore.Outbox, error) // publishes the orders, if set
	orders      message.Subscriber
	ordersTopic string
	close       func()
}

// goChannelTransport is one in-memory GoChannel. It hands every message to
// every subscriber of a topic, so each instance gets a topic of its own.
func goChannelTransport(logger watermill.LoggerAdapter) transport {
	pubSub := gochannel.NewGoChannel(gochannel.Config{}, logger)
	return transport{
		lines:       pubSub,
		linesTopic:  func(i int) string { return "order.lines." + strconv.Itoa(i) },
		subscriber:  func() (message.Subscriber, error) { return pubSub, nil },
		publisher:   pubSub,
		orders:      pubSub,
		ordersTopic: "orders",
		close:       func() { pubSub.Close() },
	}
}

// sqlTransport is watermill-sql on db. PostgreSQLQueueSchema hands each
// line to one subscriber; in watermill-sql v4.1.2 its subscribers take
// turns (a plain FOR UPDATE on the batch). Batches of one message: when a
// subscriber closes mid-batch, v4.1.2 acks, and so deletes, the whole
// batch, delivered or not. The topics are this run's own and dropped at
// the end.
func sqlTransport(ctx context.Context, db *sql.DB, logger watermill.LoggerAdapter) (transport, error) {
	schema := wsql.PostgreSQLQueueSchema{SubscribeBatchSize: 1}
	offsets := wsql.PostgreSQLQueueOffsetsAdapter{DeleteOnAck: true}
	run := strings.ReplaceAll(watermill.NewShortUUID(), "-", "")
	lines, orders := "lockreg_example_lines_"+run, "lockreg_example_orders_"+run
	for _, topic := range []string{lines, orders} {
		queries, err := schema.SchemaInitializingQueries(wsql.SchemaInitializingQueriesParams{Topic: topic})
		if err != nil {
			return transport{}, err
		}
		for _, q := range queries {
			if _, err := db.ExecContext(ctx, q.Query, q.Args...); err != nil {
				return transport{}, err
			}
		}
	}
	pub, err := wsql.NewPublisher(wsql.BeginnerFromStdSQL(db), wsql.PublisherConfig{SchemaAdapter: schema}, logger)
	if err != nil {
		return transport{}, err
	}
	var subs []message.Subscriber
	subscriber := func() (message.Subscriber, error) {
		s, err := wsql.NewSubscriber(wsql.BeginnerFromStdSQL(db), wsql.SubscriberConfig{
			SchemaAdapter: schema, OffsetsAdapter: offsets, PollInterval: 10 * time.Millisecond}, logger)
		if err == nil {
			subs = append(subs, s)
		}
		return s, err
	}
	ordersSub, err := subscriber()
	if err != nil {
		return transport{}, err
	}
	return transport{
		lines:      pub,
		linesTopic: func(int) string { return lines },
		subscriber: subscriber,
		outbox: func(store *sqlstore.Store) (*sqlstore.Outbox, error) {
			return sqlstore.NewOutbox(store, func(tx *sql.Tx) (message.Publisher, error) {
				return wsql.NewPublisher(wsql.TxFromStdSQL(tx), wsql.PublisherConfig{SchemaAdapter: schema}, logger)
			})
		},
		orders:      ordersSub,
		ordersTopic: orders,
		close: func() {
			for _, s := range subs {
				s.Close()
			}
			pub.Close()
			for _, topic := range []string{lines, orders} {
				db.Exec(`DROP TABLE IF EXISTS ` + schema.MessagesTable(topic))
			}
		},
	}, nil
}

func open(dsn string) (*sql.DB, error) {
	switch {
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		return sql.Open("pgx", dsn)
	case strings.HasPrefix(dsn, "mysql://"):
		return sql.Open("mysql", strings.TrimPrefix(dsn, "mysql://"))
	case strings.HasPrefix(dsn, "sqlite:"):
		file := strings.TrimPrefix(dsn, "sqlite:")
		return sql.Open("sqlite", "file:"+file+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	}
	return nil, fmt.Errorf("unknown database in -dsn %q: use sqlite:FILE, postgres://... or mysql://...", dsn)
}

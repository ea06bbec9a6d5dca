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
// MariaDB/MySQL instead:
//
//	go run ./examples/aggregator -dsn 'postgres://postgres@127.0.0.1:5432/test?sslmode=disable'
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite"

	"github.com/lockreg/lockreg/aggregator"
	"github.com/lockreg/lockreg/jdbc"
	"github.com/lockreg/lockreg/registry"
)

func main() {
	defaultFile := filepath.Join(os.TempDir(), "lockreg-aggregator.db")
	dsn := flag.String("dsn", "sqlite:"+defaultFile, "database: sqlite:FILE, postgres://... or mysql://...")
	orders := flag.Int("orders", 4, "orders to aggregate")
	flag.Parse()
	if err := run(os.Stdout, *dsn, *orders); err != nil {
		log.Fatal(err)
	}
}

func run(out io.Writer, dsn string, orders int) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	db, err := open(dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := jdbc.CreateSchema(ctx, db); err != nil {
		return err
	}
	// A region of this run's own, so that earlier runs' groups do not count.
	region := "example-" + watermill.NewShortUUID()

	logger := watermill.NopLogger{}
	pubSub := gochannel.NewGoChannel(gochannel.Config{}, logger)
	defer pubSub.Close()
	aggregated, err := pubSub.Subscribe(ctx, "orders")
	if err != nil {
		return err
	}

	// Two instances: each has its own lock repository (client id), registry,
	// store handle and router, and consumes its own share of the lines.
	for i := range 2 {
		repo, err := jdbc.NewLockRepository(db, jdbc.WithRegion(region))
		if err != nil {
			return err
		}
		locks := registry.New(repo)
		defer locks.Close(context.WithoutCancel(ctx))
		store, err := jdbc.NewGroupStore(db, jdbc.WithRegion(region))
		if err != nil {
			return err
		}
		agg, err := aggregator.New(aggregator.Config{
			Publisher:    pubSub,
			OutputTopic:  "orders",
			Store:        store,
			Locks:        locks,
			GroupTimeout: 30 * time.Second,
			Logger:       logger,
		})
		if err != nil {
			return err
		}
		router, err := message.NewRouter(message.RouterConfig{}, logger)
		if err != nil {
			return err
		}
		agg.AddHandler(router, "aggregate-orders", "order.lines."+strconv.Itoa(i), pubSub)
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
			if err := pubSub.Publish("order.lines."+strconv.Itoa(n%2), m); err != nil {
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

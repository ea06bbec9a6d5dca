// Command resequencer shows two instances of a service putting the steps
// of each account back in order with lockreg's Watermill resequencer. The
// instances share a group store and lock table in one database; each step
// goes to one instance or the other, as competing consumers would get
// them, out of order, and the steps of each account still leave in order,
// each contiguous run as soon as it is complete, whichever instance
// releases it.
//
// By default the database is an SQLite file and the transport a Watermill
// GoChannel, so no server is needed:
//
//	go run ./examples/resequencer
//
// -dsn keeps the groups and locks in PostgreSQL (through pgx) or
// MariaDB/MySQL instead:
//
//	go run ./examples/resequencer -dsn 'postgres://postgres@127.0.0.1:5432/test?sslmode=disable'
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
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

	"github.com/lockreg/lockreg/groupstore/sqlstore"
	"github.com/lockreg/lockreg/jdbc"
	"github.com/lockreg/lockreg/registry"
	"github.com/lockreg/lockreg/resequencer"
)

func main() {
	defaultFile := filepath.Join(os.TempDir(), "lockreg-resequencer.db")
	dsn := flag.String("dsn", "sqlite:"+defaultFile, "database: sqlite:FILE, postgres://... or mysql://...")
	accounts := flag.Int("accounts", 3, "accounts whose steps to resequence")
	steps := flag.Int("steps", 5, "steps per account")
	flag.Parse()
	if err := run(os.Stdout, *dsn, *accounts, *steps); err != nil {
		log.Fatal(err)
	}
}

func run(out io.Writer, dsn string, accounts, steps int) error {
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
	// Input: GoChannel delivers concurrently and out of order. Output: a
	// GoChannel whose Publish waits for the consumer's ack keeps the order
	// of publishes, as an ordered topic would.
	in := gochannel.NewGoChannel(gochannel.Config{}, logger)
	defer in.Close()
	outPubSub := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, logger)
	defer outPubSub.Close()
	ordered, err := outPubSub.Subscribe(ctx, "steps.ordered")
	if err != nil {
		return err
	}

	// Two instances: each has its own lock repository (client id), registry,
	// store handle and router, and consumes its own share of the steps.
	for i := range 2 {
		repo, err := jdbc.NewLockRepository(ctx, db, jdbc.WithRegion(region))
		if err != nil {
			return err
		}
		locks, err := registry.New(repo, registry.WithIdleBetweenTries(10*time.Millisecond))
		if err != nil {
			return err
		}
		defer locks.Close(context.WithoutCancel(ctx))
		store, err := sqlstore.New(db, sqlstore.Config{Region: region})
		if err != nil {
			return err
		}
		defer store.Close(context.WithoutCancel(ctx)) // stops its background clean-up
		rs, err := resequencer.New(resequencer.Config{
			Publisher:               outPubSub,
			OutputTopic:             "steps.ordered",
			Store:                   store,
			Locks:                   locks,
			ReleasePartialSequences: true,
			GroupTimeout:            30 * time.Second,
			Logger:                  logger,
		})
		if err != nil {
			return err
		}
		router, err := message.NewRouter(message.RouterConfig{}, logger)
		if err != nil {
			return err
		}
		rs.AddHandler(router, "resequence-steps", "steps."+strconv.Itoa(i), in)
		done := make(chan error, 1)
		go func() { done <- router.Run(ctx) }()
		defer func() { router.Close(); <-done }()
		<-router.Running()
	}

	// Every step of every account, shuffled, alternating between the
	// instances.
	type step struct{ account, n int }
	var all []step
	for a := 1; a <= accounts; a++ {
		for n := 1; n <= steps; n++ {
			all = append(all, step{a, n})
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	rng.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	go func() {
		for i, s := range all {
			m := message.NewMessage(watermill.NewUUID(), []byte(strconv.Itoa(s.n)))
			m.Metadata.Set("correlation_id", "account-"+strconv.Itoa(s.account))
			m.Metadata.Set("sequence_number", strconv.Itoa(s.n))
			m.Metadata.Set("sequence_size", strconv.Itoa(steps))
			if err := in.Publish("steps."+strconv.Itoa(i%2), m); err != nil {
				return
			}
		}
	}()

	results := map[string][]string{}
	for received := 0; received < len(all); received++ {
		select {
		case m := <-ordered:
			key := m.Metadata.Get("correlation_id")
			results[key] = append(results[key], string(m.Payload))
			m.Ack()
		case <-ctx.Done():
			return fmt.Errorf("received %d of %d steps: %w", received, len(all), ctx.Err())
		}
	}
	keys := make([]string, 0, len(results))
	for k := range results {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(out, "%s: %s\n", k, strings.Join(results[k], " "))
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

package testharness

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/lockreg/lockreg/aggregator"
	"github.com/lockreg/lockreg/groupstore"
	"github.com/lockreg/lockreg/registry"
	"github.com/lockreg/lockreg/resequencer"
)

// Locks is where a cluster's locks are: the lock table in the cluster's
// PostgreSQL, or servers of their own (an etcd cluster). The children and
// the test process get their lock repositories from it.
type Locks struct {
	// Addrs returns the addresses of the lock servers, starting them if
	// need be, which every child gets in its configuration and passes to
	// Repository. Nil: the locks need no addresses.
	Addrs func(t testing.TB) []string
	// Repository returns a lock repository on region for the client
	// clientID, and a function that closes what Repository opened (the
	// registry made on the repository is closed before it). db is the
	// process's pool on the cluster's PostgreSQL, addrs what Addrs
	// returned in the test process.
	Repository func(ctx context.Context, db *sql.DB, addrs []string, region, clientID string) (registry.Repository, func(), error)
}

// A child process is the test binary run with childEnv set to its
// childConfig in JSON; TestMain then calls ChildMain instead of the tests.
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
	kindPerKey      = "perkey" // perkey.go
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
	Kind      string // kindAggregator, kindResequencer or kindPerKey
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
	// LockAddrs are the lock servers' addresses, for Locks.Repository.
	LockAddrs []string
}

// InChild reports whether this process is a child that a cluster test
// started: TestMain then calls ChildMain instead of running the tests.
func InChild() bool { return os.Getenv(childEnv) != "" }

// ChildMain runs the router of this child process, its locks from locks'
// Repository, until it is told to stop, and returns the process's exit
// code.
func ChildMain(locks Locks) int {
	var cfg childConfig
	if err := json.Unmarshal([]byte(os.Getenv(childEnv)), &cfg); err != nil {
		fmt.Fprintf(os.Stderr, "clustertest child: bad %s: %v\n", childEnv, err)
		return 2
	}
	if err := runChild(cfg, locks); err != nil {
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
func runChild(cfg childConfig, locks Locks) error {
	if cfg.Kind == kindPerKey {
		return runPerKeyChild(cfg, locks)
	}
	ctx, cancel := childContext(nil)
	defer cancel()
	logger := childLogger()
	var counters childCounters

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
	db, err := openChildDB(cfg.DSN, conns)
	if err != nil {
		return err
	}
	defer db.Close()

	clientID := fmt.Sprintf("clustertest-%d-%s", cfg.Index, uuid.NewString()[:8])
	reg, closeReg, err := childRegistry(ctx, cfg, locks, db, clientID, &counters,
		registry.WithTTL(lockTTL), registry.WithKeepAlive())
	if err != nil {
		return err
	}
	defer closeReg()

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
	var groupLocks registry.LockRegistry = reg
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

	return serve(ctx, router, reg, newReport(), &counters, isOutbox)
}

// childContext returns the context of a child's run: it ends at SIGTERM or
// an interrupt, or when standard input closes (the parent stops this
// child, or has died). Each line read from standard input before is passed
// to command, unless it is nil.
func childContext(command func(line string)) (context.Context, context.CancelFunc) {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		if command == nil {
			io.Copy(io.Discard, os.Stdin)
		} else {
			for in := bufio.NewScanner(os.Stdin); in.Scan(); {
				command(in.Text())
			}
		}
		cancel() // EOF
	}()
	return ctx, func() { cancel(); stop() }
}

// childLogger returns a child's Watermill logger: warnings and errors, to
// standard error.
func childLogger() watermill.LoggerAdapter {
	return watermill.NewSlogLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
}

// openChildDB opens a child's pool on dsn with at most conns connections,
// all kept when idle.
func openChildDB(dsn string, conns int) (*sql.DB, error) {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	return db, nil
}

// childRegistry returns a child's registry, with opts, on the repository
// of locks for clientID, and a function that closes both. It polls every
// 20 ms, counts the errors it reports in counters and prints the first 20.
func childRegistry(ctx context.Context, cfg childConfig, locks Locks, db *sql.DB, clientID string, counters *childCounters,
	opts ...registry.Option) (*registry.Registry, func(), error) {
	repo, closeRepo, err := locks.Repository(ctx, db, cfg.LockAddrs, cfg.Region, clientID)
	if err != nil {
		return nil, nil, err
	}
	var errMu sync.Mutex
	reg, err := registry.New(repo, append(opts, registry.WithIdleBetweenTries(20*time.Millisecond),
		registry.WithErrorHandler(func(key string, err error) {
			if counters.lockErrors.Add(1) <= 20 {
				errMu.Lock()
				fmt.Fprintf(os.Stderr, "clustertest child %d: lock %s: %v\n", cfg.Index, key, err)
				errMu.Unlock()
			}
		}))...)
	if err != nil {
		closeRepo()
		return nil, nil, err
	}
	return reg, func() { reg.Close(context.Background()); closeRepo() }, nil
}

// newReport returns a child's report function, which prints one report
// line at a time.
func newReport() func(format string, args ...any) {
	var mu sync.Mutex
	return func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Printf(reportPrefix+format+"\n", args...)
	}
}

// serve runs router until ctx ends, reporting "ready" once it runs, its
// counters every 200 ms and at the end ("final"), and then closes reg.
func serve(ctx context.Context, router *message.Router, reg *registry.Registry, report func(format string, args ...any),
	counters *childCounters, outbox bool) error {
	ran := make(chan error, 1)
	go func() { ran <- router.Run(ctx) }()
	select {
	case <-router.Running():
	case err := <-ran:
		return fmt.Errorf("the router stopped before running: %v", err)
	}
	report("ready outbox=%t", outbox)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	var err error
	for {
		select {
		case <-tick.C:
			report("stats %s", counters)
			continue
		case err = <-ran:
		}
		break
	}
	report("final %s", counters)
	if err != nil {
		return fmt.Errorf("router: %w", err)
	}
	// The router closed the subscribers and stopped the timeout runners;
	// the registry gives back whatever leases are left.
	if err := reg.Close(context.Background()); err != nil {
		return fmt.Errorf("closing the registry: %w", err)
	}
	return nil
}

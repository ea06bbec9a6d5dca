package testharness

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/google/uuid"
)

// ClusterConfig sizes a cluster and says where its locks are.
type ClusterConfig struct {
	kind      string // kindAggregator, kindResequencer or kindPerKey: set by the test's Run
	Children  int    // routers, one per child process
	Handlers  int    // consumer handlers per router
	BatchSize int    // messages per subscriber transaction
	// StoreLocks leaves the handlers' Config.Locks nil: the SQL store
	// locks each group with its row lock in its own transactions, instead
	// of a lease in the lock registry. ForEachGroupLock sets it.
	StoreLocks bool
	// Locks is where the locks are.
	Locks Locks
}

// GroupLock names a way in which the aggregator and resequencer handlers
// lock their groups.
type GroupLock string

// The group locks.
const (
	RegistryLock GroupLock = "registry" // a lease in the cluster's lock registry (ClusterConfig.Locks)
	StoreLock    GroupLock = "store"    // the group row's lock in the SQL store's transactions
)

// ForEachGroupLock runs test on cfg as a subtest per group lock of locks,
// named after it.
func ForEachGroupLock(t *testing.T, cfg ClusterConfig, locks []GroupLock, test func(t *testing.T, cfg ClusterConfig)) {
	for _, l := range locks {
		cfg.StoreLocks = l == StoreLock
		t.Run(string(l), func(t *testing.T) { test(t, cfg) })
	}
}

// DefaultCluster is the cluster the tests run, its locks in locks: four
// routers of four consumer handlers each, every subscriber taking 25
// messages per transaction. On two cores under -race the cluster is
// CPU-bound: 2, 4 or 8 handlers per router and batches of 25 or 100
// handled 20 000 messages in the same time, within the noise.
func DefaultCluster(locks Locks) ClusterConfig {
	return ClusterConfig{Children: 4, Handlers: 4, BatchSize: 25, Locks: locks}
}

// cluster is the parent's view of a running cluster: its topics, its
// children and a pool of its own.
type cluster struct {
	t      *testing.T
	db     *sql.DB
	region string
	// Topics; their tables are dropped when the test ends.
	input, output, discard string
	schema                 queueSchema
	pub                    *wsql.Publisher
	children               []*child
	start                  time.Time
	published              int      // deliveries published to the input topic
	locks                  Locks    // where the locks are
	lockAddrs              []string // the lock servers' addresses, from locks.Addrs
}

// child is one child process.
type child struct {
	index  int
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	out    *reportWriter
	stderr *tailWriter
	done   chan struct{} // closed once the process has been reaped
	err    error         // Wait's result, once done
	killed bool
}

// startCluster creates the topics of a new cluster on db, starts its
// children and waits until every router runs. Every child is killed, if
// still running, and reaped when t ends, and the cluster's tables and rows
// are removed.
func startCluster(t *testing.T, db *sql.DB, dsn string, cfg ClusterConfig) *cluster {
	t.Helper()
	id := strings.ReplaceAll(uuid.NewString(), "-", "")[:12]
	c := &cluster{
		t: t, db: db,
		region:  "clustertest-" + id,
		input:   "clustertest_" + id + "_in",
		output:  "clustertest_" + id + "_out",
		discard: "clustertest_" + id + "_discard",
		schema:  newQueueSchema(cfg.BatchSize),
		locks:   cfg.Locks,
	}
	if cfg.Locks.Addrs != nil {
		c.lockAddrs = cfg.Locks.Addrs(t)
	}
	ctx := context.Background()
	t.Cleanup(func() {
		for _, topic := range []string{c.input, c.output, c.discard} {
			if _, err := db.ExecContext(ctx, `DROP TABLE IF EXISTS `+c.schema.MessagesTable(topic)); err != nil {
				t.Errorf("dropping topic %s: %v", topic, err)
			}
		}
		for _, table := range []string{"INT_GROUP_MESSAGE", "INT_GROUP", "INT_LOCK_WAIT", "INT_LOCK"} {
			if _, err := db.ExecContext(ctx, `DELETE FROM `+table+` WHERE REGION = $1`, c.region); err != nil {
				t.Errorf("removing the rows of %s: %v", table, err)
			}
		}
	})
	for _, topic := range []string{c.input, c.output, c.discard} {
		if err := createTopic(ctx, db, c.schema, topic); err != nil {
			t.Fatal(err)
		}
	}
	var err error
	c.pub, err = wsql.NewPublisher(wsql.BeginnerFromStdSQL(db), wsql.PublisherConfig{SchemaAdapter: c.schema}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.pub.Close() })

	for i := range cfg.Children {
		c.children = append(c.children, c.startChild(childConfig{
			Kind: cfg.kind, Index: i, DSN: dsn, Region: c.region,
			Input: c.input, Output: c.output, Discard: c.discard,
			Handlers: cfg.Handlers, BatchSize: cfg.BatchSize, StoreLocks: cfg.StoreLocks,
			LockAddrs: c.lockAddrs,
		}))
	}
	deadline := time.After(time.Minute)
	for _, ch := range c.children {
		select {
		case <-ch.out.ready:
		case <-ch.done:
			t.Fatalf("child %d exited before its router ran: %v%s", ch.index, ch.err, ch.tail())
		case <-deadline:
			t.Fatalf("child %d: its router did not run within a minute%s", ch.index, ch.tail())
		}
	}
	c.start = time.Now()
	return c
}

// startChild starts one child process.
func (c *cluster) startChild(cfg childConfig) *child {
	c.t.Helper()
	raw, err := json.Marshal(cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	// TestMain runs the child instead of the tests; -test.run=^$ would
	// keep any test from running if it did not.
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+string(raw))
	ch := &child{index: cfg.Index, cmd: cmd, out: newReportWriter(), stderr: &tailWriter{max: 16 << 10},
		done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = ch.out, ch.stderr
	cmd.WaitDelay = 5 * time.Second
	if ch.stdin, err = cmd.StdinPipe(); err != nil {
		c.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	go func() {
		ch.err = cmd.Wait()
		close(ch.done)
	}()
	c.t.Cleanup(func() {
		select {
		case <-ch.done:
		default:
			cmd.Process.Kill()
			<-ch.done
		}
	})
	return ch
}

// tail returns the end of a child's standard error, for messages.
func (ch *child) tail() string {
	s := strings.TrimSpace(ch.stderr.String())
	if s == "" {
		return ""
	}
	return fmt.Sprintf("\nchild %d stderr (tail):\n%s", ch.index, s)
}

// kill kills child i with SIGKILL and reaps it.
func (c *cluster) kill(i int) {
	c.t.Helper()
	ch := c.children[i]
	ch.killed = true
	if err := ch.cmd.Process.Kill(); err != nil {
		c.t.Fatalf("killing child %d: %v", i, err)
	}
	<-ch.done
	c.t.Logf("%v: child %d killed with SIGKILL (%v) after %s", c.elapsed(), i, ch.err, ch.out.stats())
}

// stop stops the children that were not killed by closing their standard
// input, waits for them and fails the test unless each exited cleanly. Call
// it once every delivery was acked (see queueSchema).
func (c *cluster) stop() {
	c.t.Helper()
	for _, ch := range c.children {
		if !ch.killed {
			ch.stdin.Close()
		}
	}
	deadline := time.After(time.Minute)
	for _, ch := range c.children {
		if ch.killed {
			continue
		}
		select {
		case <-ch.done:
		case <-deadline:
			c.t.Fatalf("child %d did not stop within a minute%s", ch.index, ch.tail())
		}
		if ch.err != nil {
			c.t.Errorf("child %d exited with %v%s", ch.index, ch.err, ch.tail())
		} else if !ch.out.final() {
			c.t.Errorf("child %d exited without its final report%s", ch.index, ch.tail())
		}
	}
}

// elapsed is the time since the routers ran, for the log.
func (c *cluster) elapsed() time.Duration { return time.Since(c.start).Round(10 * time.Millisecond) }

// outbox reports whether every child's store publishes in its transactions.
func (c *cluster) outbox() bool {
	for _, ch := range c.children {
		if !ch.out.outbox {
			return false
		}
	}
	return true
}

package clustertest

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
)

// clusterConfig sizes a cluster.
type clusterConfig struct {
	Kind      string // kindAggregator or kindResequencer
	Children  int    // routers, one per child process
	Handlers  int    // consumer handlers per router
	BatchSize int    // messages per subscriber transaction
	// StoreLocks leaves the handlers' Config.Locks nil: the SQL store
	// locks each group with its row lock in its own transactions, instead
	// of a lease in the lock table.
	StoreLocks bool
}

// forEachGroupLock runs test on cfg as a subtest per group lock: "registry"
// (a lease in the lock table) and "store" (the group row's lock in the
// store's transactions).
func forEachGroupLock(t *testing.T, cfg clusterConfig, test func(t *testing.T, cfg clusterConfig)) {
	for _, store := range []bool{false} { // the store's row locks do not use etcd
		name := "registry"
		if store {
			name = "store"
		}
		cfg.StoreLocks = store
		t.Run(name, func(t *testing.T) { test(t, cfg) })
	}
}

// defaultCluster is the cluster both tests run: four routers of four
// consumer handlers each, every subscriber taking 25 messages per
// transaction. On two cores under -race the cluster is CPU-bound: 2, 4 or
// 8 handlers per router and batches of 25 or 100 handled 20 000 messages
// in the same time, within the noise.
func defaultCluster(kind string) clusterConfig {
	return clusterConfig{Kind: kind, Children: 4, Handlers: 4, BatchSize: 25}
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
	endpoints              []string // the etcd cluster's
	start                  time.Time
	published              int // deliveries published to the input topic
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
func startCluster(t *testing.T, db *sql.DB, dsn string, cfg clusterConfig) *cluster {
	t.Helper()
	id := strings.ReplaceAll(uuid.NewString(), "-", "")[:12]
	c := &cluster{
		t: t, db: db,
		region:  "clustertest-" + id,
		input:   "clustertest_" + id + "_in",
		output:  "clustertest_" + id + "_out",
		discard: "clustertest_" + id + "_discard",
		schema:  newQueueSchema(cfg.BatchSize),
	}
	c.endpoints = etcdEndpoints(t)
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
			Kind: cfg.Kind, Index: i, DSN: dsn, Region: c.region,
			Input: c.input, Output: c.output, Discard: c.discard,
			Handlers: cfg.Handlers, BatchSize: cfg.BatchSize, StoreLocks: cfg.StoreLocks,
			Endpoints: c.endpoints,
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

// state is what a wait sees: whether it is done, a measure of the
// cluster's work that grows while the cluster makes progress, and a
// description for the log.
type state struct {
	done     bool
	progress int
	desc     string
}

// stallTimeout is how long a wait lets the cluster make no progress at all
// before it fails the test: a slow or busy machine only makes a test
// slower, a stuck cluster fails it within a minute.
const stallTimeout = time.Minute

// waitFor polls check every 250 ms until it reports done, and fails the
// test if a child that was not killed exits, if the progress does not grow
// for stallTimeout, or if the wait lasts longer than limit.
func (c *cluster) waitFor(what string, limit time.Duration, check func() state) {
	c.t.Helper()
	start := time.Now()
	last, lastAt := -1, start
	fail := func(format string, args ...any) {
		c.t.Helper()
		var b strings.Builder
		for _, ch := range c.children {
			state := ""
			if ch.killed {
				state = " (killed)"
			}
			fmt.Fprintf(&b, "\nchild %d%s: %s", ch.index, state, ch.out.stats())
			b.WriteString(ch.tail())
		}
		c.t.Fatalf("%v: waiting until %s: "+format+"%s", append(append([]any{c.elapsed(), what}, args...), b.String())...)
	}
	for {
		s := check()
		if s.done {
			c.t.Logf("%v: %s: %s", c.elapsed(), what, s.desc)
			return
		}
		now := time.Now()
		if s.progress > last {
			last, lastAt = s.progress, now
		}
		for _, ch := range c.children {
			select {
			case <-ch.done:
				if !ch.killed {
					fail("child %d exited: %v; %s", ch.index, ch.err, s.desc)
				}
			default:
			}
		}
		switch {
		case now.Sub(lastAt) > stallTimeout:
			fail("no progress for %v: %s", stallTimeout, s.desc)
		case now.Sub(start) > limit:
			fail("not done within %v: %s", limit, s.desc)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// progress is a state check for a wait on the releases: released counts
// what the output topic shows released (by a query; distinct groups or
// messages), done says when the wait is over. Its progress measure is the
// releases plus the acked deliveries.
func (c *cluster) progress(unit string, total int, released func() int, done func(released, pending int) bool) func() state {
	return func() state {
		n, p := released(), c.pending()
		return state{
			done:     done(n, p),
			progress: n + c.published - p,
			desc:     fmt.Sprintf("%d of %d %s released, %d of %d deliveries acked", n, total, unit, c.published-p, c.published),
		}
	}
}

// waitForLate waits until the discard topic holds every message of late
// and every delivery was acked.
func (c *cluster) waitForLate(late []payload) {
	c.t.Helper()
	ids := make([]string, len(late))
	for i, p := range late {
		ids[i] = p.ID
	}
	c.waitFor("the late messages discarded and every delivery acked", 2*time.Minute, func() state {
		var d int
		err := c.db.QueryRowContext(context.Background(),
			`SELECT COUNT(DISTINCT uuid) FROM `+c.table(c.discard)+` WHERE uuid = ANY($1)`, ids).Scan(&d)
		if err != nil {
			c.t.Fatalf("counting the discarded late messages: %v", err)
		}
		p := c.pending()
		return state{
			done:     d == len(late) && p == 0,
			progress: d + c.published - p,
			desc:     fmt.Sprintf("%d of %d late messages discarded, %d deliveries pending", d, len(late), p),
		}
	})
}

// publish publishes msgs to the input topic, in order, a thousand a
// statement.
func (c *cluster) publish(msgs []*message.Message) {
	c.t.Helper()
	for len(msgs) > 0 {
		n := min(len(msgs), 1000)
		if err := c.pub.Publish(c.input, msgs[:n]...); err != nil {
			c.t.Fatalf("publishing: %v", err)
		}
		c.published += n
		msgs = msgs[n:]
	}
}

// count runs a query that returns one number.
func (c *cluster) count(query string) int {
	c.t.Helper()
	var n int
	if err := c.db.QueryRowContext(context.Background(), query).Scan(&n); err != nil {
		c.t.Fatalf("%s: %v", query, err)
	}
	return n
}

// table returns the quoted table name of topic.
func (c *cluster) table(topic string) string { return c.schema.MessagesTable(topic) }

// pending returns the number of input deliveries not acked yet.
func (c *cluster) pending() int { return c.count(`SELECT COUNT(*) FROM ` + c.table(c.input)) }

// row is a message as a topic's table holds it.
type row struct {
	Offset   int64
	UUID     string
	Payload  []byte
	Metadata map[string]string
}

// rows returns the messages of topic in offset order.
func (c *cluster) rows(topic string) []row {
	c.t.Helper()
	rs, err := c.db.QueryContext(context.Background(),
		`SELECT "offset", uuid, payload, metadata FROM `+c.table(topic)+` ORDER BY "offset"`)
	if err != nil {
		c.t.Fatal(err)
	}
	defer rs.Close()
	var out []row
	for rs.Next() {
		var (
			r        row
			metadata []byte
		)
		if err := rs.Scan(&r.Offset, &r.UUID, &r.Payload, &metadata); err != nil {
			c.t.Fatal(err)
		}
		if err := json.Unmarshal(metadata, &r.Metadata); err != nil {
			c.t.Fatalf("metadata of %s in %s: %v", r.UUID, topic, err)
		}
		out = append(out, r)
	}
	if err := rs.Err(); err != nil {
		c.t.Fatal(err)
	}
	return out
}

// logChildren logs each child's last report and returns the sums of their
// handled and failed counts. Successful handler calls beyond the deliveries
// published were deliveries handled again: those that the killed child
// handled but did not ack (its batch's transaction died with it), and
// those it handled after its last report (so the figure is a lower bound).
func (c *cluster) logChildren() (handled, failed int64) {
	c.t.Helper()
	for _, ch := range c.children {
		s := ch.out.last()
		state := "stopped"
		if ch.killed {
			state = "killed, last report"
		}
		c.t.Logf("child %d (%s): %d handled, %d failed and redelivered, %d lock errors",
			ch.index, state, s.handled, s.failed, s.lockErrors)
		handled += s.handled
		failed += s.failed
	}
	c.t.Logf("%d successful handler calls for %d deliveries: at least %d deliveries handled again after the kill",
		handled, c.published, max(handled-int64(c.published), 0))
	return handled, failed
}

// childStats is a child's report.
type childStats struct{ handled, failed, lockErrors int64 }

// reportWriter is a child's standard output: it parses the report lines.
type reportWriter struct {
	ready chan struct{} // closed at the ready line
	// events receives the report lines of other verbs, without the
	// prefix, for tests whose children report more; a line that finds it
	// full is dropped.
	events chan string

	mu       sync.Mutex
	partial  []byte
	outbox   bool // set before ready is closed
	latest   childStats
	isFinal  bool
	readyHit bool
}

func newReportWriter() *reportWriter {
	return &reportWriter{ready: make(chan struct{}), events: make(chan string, 64)}
}

func (w *reportWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.partial = append(w.partial, p...)
	for {
		i := bytes.IndexByte(w.partial, '\n')
		if i < 0 {
			break
		}
		w.line(string(w.partial[:i]))
		w.partial = w.partial[i+1:]
	}
	return len(p), nil
}

// line handles one line, under w.mu.
func (w *reportWriter) line(l string) {
	rest, ok := strings.CutPrefix(l, reportPrefix)
	if !ok {
		return // children print nothing else; the test framework might
	}
	verb, args, _ := strings.Cut(rest, " ")
	fields := map[string]string{}
	for _, f := range strings.Fields(args) {
		k, v, _ := strings.Cut(f, "=")
		fields[k] = v
	}
	num := func(k string) int64 { n, _ := strconv.ParseInt(fields[k], 10, 64); return n }
	switch verb {
	case "ready":
		if !w.readyHit {
			w.readyHit = true
			w.outbox = fields["outbox"] == "true"
			close(w.ready)
		}
	case "stats", "final":
		w.latest = childStats{handled: num("handled"), failed: num("failed"), lockErrors: num("lockerrors")}
		w.isFinal = w.isFinal || verb == "final"
	default:
		select {
		case w.events <- rest:
		default:
		}
	}
}

func (w *reportWriter) last() childStats {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.latest
}

func (w *reportWriter) final() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.isFinal
}

func (w *reportWriter) stats() string {
	s := w.last()
	return fmt.Sprintf("%d handled, %d failed", s.handled, s.failed)
}

// tailWriter keeps the last max bytes written to it.
type tailWriter struct {
	max int
	mu  sync.Mutex
	buf []byte
	cut bool
}

func (w *tailWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	if len(w.buf) > w.max {
		w.buf = append([]byte(nil), w.buf[len(w.buf)-w.max:]...)
		w.cut = true
	}
	return len(p), nil
}

func (w *tailWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cut {
		return "...\n" + string(w.buf)
	}
	return string(w.buf)
}

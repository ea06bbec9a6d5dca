package clustertest

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/lockreg/lockreg/lockmw"
	"github.com/lockreg/lockreg/registry"
)

// The cluster test of package lockmw: four routers, each a child process,
// consume one topic of messages of 50 keys as competing consumers, each
// handler behind lockmw.PerKey on a registry of its own (no keep-alive:
// the middleware renews). Every handler guards its work in PostgreSQL: it
// enters by setting its key's fence to its token, only if the fence is
// lower (UPDATE ... WHERE fence < token), and leaves by counting its run,
// only if the fence is still its token; each run is recorded with the
// database's times of both and with the middleware's verdict. A few
// handlers run 2.5 TTLs, ignoring their context. One child is killed with
// SIGKILL; another is stopped with SIGSTOP while it runs a long handler,
// until the test process has taken that handler's key (its lease having
// expired meanwhile) and run a guarded step of its own, and then resumed.

// The perkey children's settings.
const (
	perKeyTTL      = time.Second
	perKeyLongRate = 0.002             // share of handler calls that run long
	perKeyLong     = 5 * perKeyTTL / 2 // a long handler's run
	perKeyPaused   = 4 * perKeyTTL     // the run of the handler the test pauses
	entityKey      = "entity_id"       // the metadata key lockmw reads
	perKeyParent   = -1                // the child index of the test process's own runs
	perKeyEvent    = "long"            // the report verb of a paused handler's start
	perKeyCommand  = "long"            // the standard-input line that asks for one
	// perKeyRenewCommand asks for one long run (perKeyLong) that nobody
	// pauses: with this run's 1 000 messages the random ones (perKeyLongRate)
	// are about two, none in about one run in eight, and the check needs
	// one acked after outliving the TTL.
	perKeyRenewCommand = "renew"
	perKeyPrefix       = lockmw.DefaultPrefix // of the lock keys
)

// perKeyTables returns the tables of the guard and of the run records of
// the cluster whose input topic is input.
func perKeyTables(input string) (guard, runs string) { return input + "_guard", input + "_runs" }

// perKeyRun is one handler run, as the handler saw it.
type perKeyRun struct {
	key            string
	token          int64
	entered        bool // the fence was moved to token
	refused        bool // the fence was already at token or beyond
	started, ended time.Time
	exitOK         bool // the fence was still token at the end
	exitRefused    bool // the fence had moved beyond token at the end
	handlerOK      bool // the handler returned nil
	long           bool
}

type perKeyRunKey struct{}

// perKeyWorker is a child's handler and run recorder.
type perKeyWorker struct {
	db          *sql.DB
	guard, runs string
	child       int
	counters    *childCounters
	longNext    atomic.Bool
	renewNext   atomic.Bool // the next run is long, not paused (perKeyRenewCommand)
	report      func(format string, args ...any)
	mu          sync.Mutex
	rng         *rand.Rand
}

var (
	errPerKeyRefused = errors.New("clustertest: the guard refused the token: a newer holder entered first")
	errPerKeyOverlap = errors.New("clustertest: a newer holder entered while this run held the key")
)

// record is the outermost middleware: it gives the handler a run record
// and stores it with the verdict of the middlewares inside. A run whose
// record cannot be stored is nacked.
func (w *perKeyWorker) record(h message.HandlerFunc) message.HandlerFunc {
	return func(m *message.Message) ([]*message.Message, error) {
		run := &perKeyRun{}
		orig := m.Context()
		m.SetContext(context.WithValue(orig, perKeyRunKey{}, run))
		out, err := h(m)
		m.SetContext(orig)
		if run.entered || run.refused {
			if rerr := w.store(context.WithoutCancel(orig), m.UUID, run, err); rerr != nil {
				err = errors.Join(err, rerr)
			}
		}
		if err != nil {
			w.counters.failed.Add(1)
			return nil, err
		}
		w.counters.handled.Add(1)
		return out, nil
	}
}

func (w *perKeyWorker) store(ctx context.Context, id string, run *perKeyRun, err error) error {
	nullTime := func(t time.Time) sql.NullTime { return sql.NullTime{Time: t, Valid: !t.IsZero()} }
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	_, serr := w.db.ExecContext(ctx, `INSERT INTO `+w.runs+` (uuid, k, token, child, started, ended, refused, exit_ok, `+
		`exit_refused, handler_ok, acked, lost, long, err) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)`,
		id, run.key, run.token, w.child, nullTime(run.started), nullTime(run.ended), run.refused, run.exitOK,
		run.exitRefused, run.handlerOK, err == nil, errors.Is(err, lockmw.ErrLockLost), run.long, msg)
	if serr != nil {
		return fmt.Errorf("recording the run: %w", serr)
	}
	return nil
}

// handle is the guarded handler.
func (w *perKeyWorker) handle(m *message.Message) error {
	ctx := m.Context()
	run, _ := ctx.Value(perKeyRunKey{}).(*perKeyRun)
	token, ok := lockmw.Token(ctx)
	if run == nil || !ok {
		return errors.New("clustertest: no run record or no lock token in the message's context")
	}
	run.key, run.token = m.Metadata.Get(entityKey), token
	err := w.db.QueryRowContext(ctx, `UPDATE `+w.guard+` SET fence = $1 WHERE k = $2 AND fence < $1 RETURNING clock_timestamp()`,
		token, run.key).Scan(&run.started)
	if errors.Is(err, sql.ErrNoRows) {
		run.refused = true
		return errPerKeyRefused
	}
	if err != nil {
		return err
	}
	run.entered = true
	var d time.Duration
	switch {
	case w.longNext.CompareAndSwap(true, false):
		d = perKeyPaused
		w.report("%s key=%s uuid=%s token=%d", perKeyEvent, run.key, m.UUID, token)
	case w.renewNext.CompareAndSwap(true, false), w.draw() < perKeyLongRate:
		d = perKeyLong
	}
	if d > 0 {
		run.long = true
		time.Sleep(d) // ignoring the context, as a handler that does not watch it
	}
	err = w.db.QueryRowContext(context.WithoutCancel(ctx), `UPDATE `+w.guard+` SET n = n + 1 WHERE k = $2 AND fence = $1 `+
		`RETURNING clock_timestamp()`, token, run.key).Scan(&run.ended)
	run.exitRefused = errors.Is(err, sql.ErrNoRows)
	switch {
	case run.exitRefused && run.long:
		// It believes it is done: only the middleware can nack it.
		run.handlerOK = true
		return nil
	case run.exitRefused:
		return errPerKeyOverlap
	case err != nil:
		return err
	}
	run.exitOK, run.handlerOK = true, true
	return nil
}

func (w *perKeyWorker) draw() float64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.rng.Float64()
}

// runPerKeyChild runs the router of one perkey child until its standard
// input closes. A line "long" on it makes the next handler call run
// perKeyPaused and report its start.
func runPerKeyChild(cfg childConfig) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	var outMu sync.Mutex
	report := func(format string, args ...any) {
		outMu.Lock()
		defer outMu.Unlock()
		fmt.Printf(reportPrefix+format+"\n", args...)
	}
	var counters childCounters
	guard, runs := perKeyTables(cfg.Input)
	seed := uint64(time.Now().UnixNano()) + uint64(cfg.Index)
	w := &perKeyWorker{guard: guard, runs: runs, child: cfg.Index, counters: &counters, report: report,
		rng: rand.New(rand.NewPCG(seed, seed))}
	go func() {
		in := bufio.NewScanner(os.Stdin)
		for in.Scan() {
			switch in.Text() {
			case perKeyCommand:
				w.longNext.Store(true)
			case perKeyRenewCommand:
				w.renewNext.Store(true)
			}
		}
		cancel() // EOF: the parent stops this child, or has died
	}()

	logger := watermill.NewSlogLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	db, err := sql.Open("pgx", cfg.DSN)
	if err != nil {
		return err
	}
	defer db.Close()
	// Per handler: the subscriber's batch transaction, the handler's
	// statements and the lock's; plus the listener.
	conns := 3*cfg.Handlers + 2
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	w.db = db

	clientID := fmt.Sprintf("clustertest-perkey-%d-%s", cfg.Index, uuid.NewString()[:8])
	repo, closeRepo, err := newEtcdRepository(cfg.Endpoints, cfg.Region, clientID)
	if err != nil {
		return err
	}
	defer closeRepo()
	var errMu sync.Mutex
	locks, err := registry.New(repo, registry.WithIdleBetweenTries(20*time.Millisecond),
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
	perKey, err := lockmw.PerKey(locks, lockmw.KeyFromMetadata(entityKey), lockmw.WithTTL(perKeyTTL),
		lockmw.WithLockTimeout(lockTimeout), lockmw.WithLogger(logger))
	if err != nil {
		return err
	}

	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 20 * time.Second}, logger)
	if err != nil {
		return err
	}
	router.AddMiddleware(w.record, perKey)
	schema := newQueueSchema(cfg.BatchSize)
	for h := range cfg.Handlers {
		sub, err := wsql.NewSubscriber(wsql.BeginnerFromStdSQL(db), subscriberConfig(schema), logger)
		if err != nil {
			return err
		}
		router.AddConsumerHandler(fmt.Sprintf("perkey-%d", h), cfg.Input, sub, w.handle)
	}

	ran := make(chan error, 1)
	go func() { ran <- router.Run(ctx) }()
	select {
	case <-router.Running():
	case err := <-ran:
		return fmt.Errorf("the router stopped before running: %v", err)
	}
	report("ready outbox=false")
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
	if err := locks.Close(context.Background()); err != nil {
		return fmt.Errorf("closing the registry: %w", err)
	}
	return nil
}

// Four perkey routers handle 10 000 messages of 50 keys; one is killed
// with SIGKILL at 30 %, another paused with SIGSTOP at 50 % while it runs a
// long handler, whose key the test process takes once its lease has
// expired. No two runs of a key the middleware acked overlap (by the
// guard, and by the database's times of their steps), no run that found a
// newer holder in the guard was acked or went unreported as a lost lease,
// the paused run was nacked although its handler returned nil, some long
// handlers outlived the TTL and were acked, and every message was acked.
func TestPerKeyClusterNeverOverlapsAKeyAndNacksStaleRunsDespiteAKilledAndAPausedMember(t *testing.T) {
	db, dsn := requirePostgres(t)
	messages, keys := 1000, 50 // a tenth of the jdbc run's, as with -short there
	c := startCluster(t, db, dsn, defaultCluster(kindPerKey))
	pk := newPerKeyCluster(t, c, keys)
	msgs := pk.workload(messages)
	for _, i := range []int{2, 3} { // neither killed nor paused
		if _, err := fmt.Fprintln(c.children[i].stdin, perKeyRenewCommand); err != nil {
			t.Fatalf("asking child %d for a long run: %v", i, err)
		}
	}
	c.publish(msgs)
	t.Logf("%v: published %d messages of %d keys", c.elapsed(), messages, keys)

	c.waitFor("30 % of the messages acked", 3*time.Minute, pk.progress(messages, 30))
	c.kill(0)
	c.waitFor("50 % of the messages acked", 3*time.Minute, pk.progress(messages, 50))
	pk.pause(1)
	c.waitFor("every message acked", 3*time.Minute, pk.progress(messages, 100))
	c.stop()
	handled, failed := c.logChildren()
	pk.check(msgs)
	t.Logf("perkey cluster: %d messages; %d handler chains acked, %d nacked; total %v", messages, handled, failed, c.elapsed())
}

// perKeyCluster is the test process's side of the perkey test.
type perKeyCluster struct {
	t           *testing.T
	c           *cluster
	keys        []string
	guard, runs string
	locks       *registry.Registry
	paused      struct { // the run paused with its child
		uuid, key string
		token     int64
	}
}

// newPerKeyCluster creates the guard and run tables of c, dropped when t
// ends, and the test process's own registry on c's region.
func newPerKeyCluster(t *testing.T, c *cluster, keys int) *perKeyCluster {
	t.Helper()
	ctx := context.Background()
	pk := &perKeyCluster{t: t, c: c}
	pk.guard, pk.runs = perKeyTables(c.input)
	t.Cleanup(func() {
		for _, table := range []string{pk.guard, pk.runs} {
			if _, err := c.db.ExecContext(ctx, `DROP TABLE IF EXISTS `+table); err != nil {
				t.Errorf("dropping %s: %v", table, err)
			}
		}
	})
	for _, q := range []string{
		`CREATE TABLE ` + pk.guard + ` (k TEXT PRIMARY KEY, fence BIGINT NOT NULL, n BIGINT NOT NULL)`,
		`CREATE TABLE ` + pk.runs + ` (id BIGSERIAL PRIMARY KEY, uuid TEXT NOT NULL, k TEXT NOT NULL, token BIGINT NOT NULL, ` +
			`child INT NOT NULL, started TIMESTAMPTZ, ended TIMESTAMPTZ, refused BOOLEAN NOT NULL, exit_ok BOOLEAN NOT NULL, ` +
			`exit_refused BOOLEAN NOT NULL, handler_ok BOOLEAN NOT NULL, acked BOOLEAN NOT NULL, lost BOOLEAN NOT NULL, long BOOLEAN NOT NULL, err TEXT NOT NULL)`,
	} {
		if _, err := c.db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	for i := range keys {
		pk.keys = append(pk.keys, fmt.Sprintf("entity-%02d", i))
		if _, err := c.db.ExecContext(ctx, `INSERT INTO `+pk.guard+` (k, fence, n) VALUES ($1, 0, 0)`, pk.keys[i]); err != nil {
			t.Fatal(err)
		}
	}
	repo, closeRepo, err := newEtcdRepository(c.endpoints, c.region, "clustertest-parent-"+uuid.NewString()[:8])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeRepo)
	if pk.locks, err = registry.New(repo, registry.WithIdleBetweenTries(20*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pk.locks.Close(ctx) })
	return pk
}

// workload returns n messages spread evenly over the keys, shuffled.
func (pk *perKeyCluster) workload(n int) []*message.Message {
	seed := uint64(time.Now().UnixNano())
	pk.t.Logf("workload seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	msgs := make([]*message.Message, n)
	for i := range msgs {
		key := pk.keys[i%len(pk.keys)]
		m := message.NewMessage(uuid.NewString(), []byte(`{"key":"`+key+`","n":`+strconv.Itoa(i)+`}`))
		m.Metadata.Set(entityKey, key)
		msgs[i] = m
	}
	rng.Shuffle(n, func(i, j int) { msgs[i], msgs[j] = msgs[j], msgs[i] })
	return msgs
}

// progress is the state of a wait until pct % of the n messages have an
// acked run, and at 100 % also until no delivery is pending.
func (pk *perKeyCluster) progress(n, pct int) func() state {
	return func() state {
		acked := pk.c.count(`SELECT COUNT(DISTINCT uuid) FROM ` + pk.runs + ` WHERE acked AND child <> ` + strconv.Itoa(perKeyParent))
		p := pk.c.pending()
		done := 100*acked >= pct*n
		if pct == 100 {
			done = acked == n && p == 0
		}
		return state{done: done, progress: acked + pk.c.published - p,
			desc: fmt.Sprintf("%d of %d messages acked, %d deliveries pending", acked, n, p)}
	}
}

// pause asks child i for a long handler run, stops the child with SIGSTOP
// as soon as the run reports its start, takes the run's key once its lease
// has expired, runs a guarded step under it and resumes the child.
func (pk *perKeyCluster) pause(i int) {
	t, c := pk.t, pk.c
	t.Helper()
	ch := c.children[i]
	for len(ch.out.events) > 0 {
		<-ch.out.events
	}
	if _, err := fmt.Fprintln(ch.stdin, perKeyCommand); err != nil {
		t.Fatalf("asking child %d for a long run: %v", i, err)
	}
	deadline := time.After(time.Minute)
	for pk.paused.uuid == "" {
		select {
		case ev := <-ch.out.events:
			verb, args, _ := strings.Cut(ev, " ")
			if verb != perKeyEvent {
				continue
			}
			f := map[string]string{}
			for _, kv := range strings.Fields(args) {
				k, v, _ := strings.Cut(kv, "=")
				f[k] = v
			}
			pk.paused.uuid, pk.paused.key = f["uuid"], f["key"]
			pk.paused.token, _ = strconv.ParseInt(f["token"], 10, 64)
		case <-ch.done:
			t.Fatalf("child %d exited before a long run: %v%s", i, ch.err, ch.tail())
		case <-deadline:
			t.Fatalf("child %d reported no long run within a minute%s", i, ch.tail())
		}
	}
	if err := ch.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatalf("stopping child %d: %v", i, err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			if err := ch.cmd.Process.Signal(syscall.SIGCONT); err != nil {
				t.Errorf("resuming child %d: %v", i, err)
			}
		}
	}
	defer resume()
	stopped := time.Now()
	t.Logf("%v: child %d stopped with SIGSTOP in a long run of %s (token %d)", c.elapsed(), i, pk.paused.key, pk.paused.token)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l := pk.locks.Obtain(perKeyPrefix + pk.paused.key)
	if err := l.LockContext(ctx); err != nil {
		t.Fatalf("taking %s while child %d is stopped: %v", pk.paused.key, i, err)
	}
	token := l.Token()
	var started, ended time.Time
	err := c.db.QueryRowContext(ctx, `UPDATE `+pk.guard+` SET fence = $1 WHERE k = $2 AND fence < $1 RETURNING clock_timestamp()`,
		token, pk.paused.key).Scan(&started)
	if err == nil {
		err = c.db.QueryRowContext(ctx, `UPDATE `+pk.guard+` SET n = n + 1 WHERE k = $2 AND fence = $1 RETURNING clock_timestamp()`,
			token, pk.paused.key).Scan(&ended)
	}
	if err != nil {
		t.Fatalf("the test's own guarded step on %s with token %d: %v", pk.paused.key, token, err)
	}
	if err := l.UnlockContext(ctx); err != nil {
		t.Fatalf("unlocking %s: %v", pk.paused.key, err)
	}
	if _, err := c.db.ExecContext(ctx, `INSERT INTO `+pk.runs+` (uuid, k, token, child, started, ended, refused, exit_ok, `+
		`exit_refused, handler_ok, acked, lost, long, err) VALUES ('', $1, $2, $3, $4, $5, false, true, false, true, true, false, false, '')`,
		pk.paused.key, token, perKeyParent, started, ended); err != nil {
		t.Fatal(err)
	}
	resume()
	t.Logf("%v: the test took %s with token %d %v after the stop, ran its step, and resumed child %d",
		c.elapsed(), pk.paused.key, token, time.Since(stopped).Round(time.Millisecond), i)
}

// storedRun is a run as recorded.
type storedRun struct {
	uuid, key                               string
	token                                   int64
	child                                   int
	started, ended                          sql.NullTime
	refused, exitOK, exitRefused, handlerOK bool
	acked, lost, long                       bool
	err                                     string
}

// check checks the run records against msgs.
func (pk *perKeyCluster) check(msgs []*message.Message) {
	t := pk.t
	t.Helper()
	rs, err := pk.c.db.QueryContext(context.Background(), `SELECT uuid, k, token, child, started, ended, refused, exit_ok, `+
		`exit_refused, handler_ok, acked, lost, long, err FROM `+pk.runs+` ORDER BY k, token, id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	var runs []storedRun
	for rs.Next() {
		var r storedRun
		if err := rs.Scan(&r.uuid, &r.key, &r.token, &r.child, &r.started, &r.ended, &r.refused, &r.exitOK,
			&r.exitRefused, &r.handlerOK, &r.acked, &r.lost, &r.long, &r.err); err != nil {
			t.Fatal(err)
		}
		runs = append(runs, r)
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}

	r := &reporter{t: t}
	acked := map[string]bool{}
	var prev *storedRun
	var stale, lost, long, longAcked, nacked int
	var paused *storedRun
	for i := range runs {
		run := &runs[i]
		what := fmt.Sprintf("run of %s with token %d (message %s, child %d)", run.key, run.token, run.uuid, run.child)
		if run.refused || run.exitRefused {
			stale++
			if run.acked {
				r.errorf("%s found a newer holder in the guard, and was acked: %s", what, run.err)
			}
			if !run.lost {
				r.errorf("%s found a newer holder in the guard, but the middleware did not report the lease lost: %q", what, run.err)
			}
		}
		if run.lost {
			lost++
		}
		if !run.acked {
			nacked++
		}
		if run.long {
			long++
			if run.acked && run.ended.Time.Sub(run.started.Time) > perKeyTTL {
				longAcked++
			}
		}
		if run.uuid == pk.paused.uuid && run.token == pk.paused.token {
			paused = run
		}
		if !run.acked {
			continue
		}
		if run.child != perKeyParent {
			acked[run.uuid] = true
		}
		// Acked runs of a key, in token order, follow each other.
		if prev != nil && prev.key == run.key && run.started.Time.Before(prev.ended.Time) {
			r.errorf("%s started at %v, before the acked run with token %d (message %s, child %d) ended at %v",
				what, run.started.Time, prev.token, prev.uuid, prev.child, prev.ended.Time)
		}
		prev = run
	}
	for _, m := range msgs {
		if !acked[m.UUID] {
			r.errorf("message %s of %s has no acked run", m.UUID, m.Metadata.Get(entityKey))
		}
	}
	r.done()
	switch {
	case paused == nil:
		t.Errorf("no record of the paused run of %s with token %d", pk.paused.key, pk.paused.token)
	case paused.acked || !paused.lost || !paused.handlerOK || !paused.exitRefused:
		t.Errorf("the paused run: acked %t, lease lost %t, its handler returned nil %t, its guarded exit refused %t (%q); "+
			"want nacked for a lost lease although the handler returned nil, its exit refused",
			paused.acked, paused.lost, paused.handlerOK, paused.exitRefused, paused.err)
	}
	if longAcked == 0 {
		t.Errorf("none of the %d long runs outlived the TTL and was acked: renewal unproven", long)
	}
	t.Logf("%d runs recorded: %d nacked, %d with the lease lost, %d that found a newer holder in the guard, "+
		"%d long, %d of them acked after outliving the TTL %v", len(runs), nacked, lost, stale, long, longAcked, perKeyTTL)
}

package testharness

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/lockreg/lockreg/lockmw"
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
	// pauses (PerKeyTest.RenewRuns): with 1 000 messages the random ones
	// (perKeyLongRate) are about two, none in about one run in eight, and
	// the check needs one acked after outliving the TTL.
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
// perKeyPaused and report its start; a line "renew" makes the next one
// run perKeyLong.
func runPerKeyChild(cfg childConfig, locks Locks) error {
	report := newReport()
	var counters childCounters
	guard, runs := perKeyTables(cfg.Input)
	seed := uint64(time.Now().UnixNano()) + uint64(cfg.Index)
	w := &perKeyWorker{guard: guard, runs: runs, child: cfg.Index, counters: &counters, report: report,
		rng: rand.New(rand.NewPCG(seed, seed))}
	ctx, cancel := childContext(func(line string) {
		switch line {
		case perKeyCommand:
			w.longNext.Store(true)
		case perKeyRenewCommand:
			w.renewNext.Store(true)
		}
	})
	defer cancel()

	logger := childLogger()
	// Per handler: the subscriber's batch transaction, the handler's
	// statements and the lock's; plus the listener.
	db, err := openChildDB(cfg.DSN, 3*cfg.Handlers+2)
	if err != nil {
		return err
	}
	defer db.Close()
	w.db = db

	clientID := fmt.Sprintf("clustertest-perkey-%d-%s", cfg.Index, uuid.NewString()[:8])
	reg, closeReg, err := childRegistry(ctx, cfg, locks, db, clientID, &counters)
	if err != nil {
		return err
	}
	defer closeReg()
	perKey, err := lockmw.PerKey(reg, lockmw.KeyFromMetadata(entityKey), lockmw.WithTTL(perKeyTTL),
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

	return serve(ctx, router, reg, report, &counters, false)
}

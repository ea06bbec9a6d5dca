package main

// The perkey scenario: messages/s through lockmw.PerKey with 4 instances
// and 50 keys, beside the same handler without it, in memory and on
// PostgreSQL. See "lockmw" in docs/benchmarks.md.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/lockreg/lockreg/jdbc"
	"github.com/lockreg/lockreg/jdbc/pgxlisten"
	"github.com/lockreg/lockreg/lockmw"
	"github.com/lockreg/lockreg/registry"
	"github.com/lockreg/lockreg/registry/registrytest"
)

const (
	perKeyScenario  = "perkey"
	perKeyInstances = 4
	perKeyWorkers   = 4 // per instance
	perKeyKeys      = 50
	perKeyRegion    = "bench-perkey"
	perKeyTable     = "bench_perkey" // the PostgreSQL handler's counters
)

// perKeyVariant is one deployment of the scenario, with the group variant
// (groups.go) of the same name selecting it.
type perKeyVariant struct {
	name   string // memory or postgres-4
	server string
}

var perKeyVariants = []perKeyVariant{{"memory", "memory"}, {"postgres-4", "postgres"}}

// The modes of a variant: the handler alone, behind the middleware, and
// behind the middleware with a lock key of its own for every worker (no
// message waits for another: the cost of the lock cycle alone).
const (
	perKeyPlain    = "plain"
	perKeyLocked   = "lockmw"
	perKeyDistinct = "lockmw-distinct"
)

// perKeyRuns runs the scenario for each selected variant in each mode and
// adds the results.
func perKeyRuns(ctx context.Context, e *env, cfg config, add func(result)) {
	for _, v := range perKeyVariants {
		if !slices.Contains(cfg.variants, v.name) {
			continue
		}
		for _, mode := range []string{perKeyPlain, perKeyLocked, perKeyDistinct} {
			r, err := perKeyRun(ctx, e, v, mode, cfg)
			if err != nil {
				r.Skipped = "failed: " + err.Error()
			}
			add(r)
		}
	}
}

// perKeyInst is one instance: its pool, registry and handler.
type perKeyInst struct {
	db     *sql.DB
	c      *counter
	reg    *registry.Registry
	handle message.HandlerFunc
}

// perKeyBench is one run's shared state.
type perKeyBench struct {
	e    *env
	name string
	mode string
	keys []string

	mu         sync.Mutex
	running    map[string]int // handlers running per key, across instances
	violations atomic.Int64   // a second handler of a key ran (with the middleware)
	errors     atomic.Int64
	ok         atomic.Int64 // handler calls that returned nil, whole run
}

// handler is the handler under test: it books the messages of each key in
// flight and, on PostgreSQL, increments the counter row the message names
// with one statement.
func (b *perKeyBench) handler(db *sql.DB) message.HandlerFunc {
	return func(m *message.Message) ([]*message.Message, error) {
		key := m.Metadata.Get("entity_id")
		b.mu.Lock()
		b.running[key]++
		if b.mode != perKeyPlain && b.running[key] > 1 {
			b.violations.Add(1)
		}
		b.mu.Unlock()
		defer func() {
			b.mu.Lock()
			if b.running[key]--; b.running[key] == 0 {
				delete(b.running, key)
			}
			b.mu.Unlock()
		}()
		if db == nil {
			return nil, nil
		}
		res, err := db.ExecContext(m.Context(), `UPDATE `+perKeyTable+` SET n = n + 1 WHERE k = $1`, m.Metadata.Get("counter"))
		if err != nil {
			return nil, err
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			return nil, fmt.Errorf("perkey: counter %s not updated (%v)", m.Metadata.Get("counter"), err)
		}
		return nil, nil
	}
}

func (b *perKeyBench) open(v perKeyVariant, storage *registrytest.Memory, cfg config) (*perKeyInst, error) {
	in := &perKeyInst{}
	var err error
	if v.server == "memory" {
		// The in-memory storage announces no releases: waiters poll.
		in.reg, err = registry.New(storage.NewClient(), registry.WithIdleBetweenTries(time.Millisecond))
	} else {
		in.db, in.c, err = openPgx(b.e.pgDSN, perKeyWorkers)
		if err != nil {
			return nil, err
		}
		opts := []jdbc.Option{jdbc.WithPrefix(lockregPrefix), jdbc.WithRegion(perKeyRegion), jdbc.WithClientID(uuid.NewString())}
		if cfg.groupListen {
			opts = append(opts, jdbc.WithListener(pgxlisten.New(in.db)))
		}
		repo, rerr := jdbc.NewLockRepository(context.Background(), in.db, opts...)
		if rerr != nil {
			in.db.Close()
			return nil, rerr
		}
		in.reg, err = registry.New(repo, registry.WithErrorHandler(func(key string, err error) {
			b.errors.Add(1)
			b.e.logf("%s: lock %s: %v", b.name, key, err)
		}))
	}
	if err != nil {
		if in.db != nil {
			in.db.Close()
		}
		return nil, err
	}
	in.handle = b.handler(in.db)
	if b.mode != perKeyPlain {
		mw, err := lockmw.PerKey(in.reg, lockmw.KeyFromMetadata("entity_id"),
			lockmw.WithLogger(benchLogger{e: b.e, name: b.name, errs: &b.errors}))
		if err != nil {
			in.close()
			return nil, err
		}
		in.handle = mw(in.handle)
	}
	return in, nil
}

func (in *perKeyInst) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := in.reg.Close(ctx)
	if in.db != nil {
		err = errors.Join(err, in.db.Close())
	}
	return err
}

// resetPerKey empties the lock tables, as before the group scenarios, and
// makes the handler's counter rows anew.
func (e *env) resetPerKey(ctx context.Context, keys []string) error {
	if err := e.resetGroups(ctx, "postgres"); err != nil {
		return err
	}
	db, _, err := openPgx(e.pgDSN, 1)
	if err != nil {
		return err
	}
	defer db.Close()
	for _, q := range []string{
		`CREATE TABLE IF NOT EXISTS ` + perKeyTable + ` (k TEXT PRIMARY KEY, n BIGINT NOT NULL, fence BIGINT NOT NULL)`,
		`TRUNCATE ` + perKeyTable,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	for _, k := range keys {
		if _, err := db.ExecContext(ctx, `INSERT INTO `+perKeyTable+` (k, n, fence) VALUES ($1, 0, 0)`, k); err != nil {
			return err
		}
	}
	return nil
}

// perKeySum returns the sum of the handler's counters.
func (e *env) perKeySum(ctx context.Context) (int64, error) {
	db, _, err := openPgx(e.pgDSN, 1)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	var n int64
	err = db.QueryRowContext(ctx, `SELECT COALESCE(SUM(n), 0) FROM `+perKeyTable).Scan(&n)
	return n, err
}

// perKeyRun measures variant v in mode.
func perKeyRun(ctx context.Context, e *env, v perKeyVariant, mode string, cfg config) (result, error) {
	name := v.name + "-" + mode
	res := result{Scenario: perKeyScenario, Contestant: name}
	if v.server == "postgres" && e.pgErr != nil {
		res.Skipped = e.pgErr.Error()
		return res, nil
	}
	b := &perKeyBench{e: e, name: perKeyScenario + "/" + name, mode: mode, running: map[string]int{}}
	for i := range perKeyKeys {
		b.keys = append(b.keys, "entity-"+strconv.Itoa(i))
	}
	c := contestant{name: name, server: v.server}
	if v.server == "postgres" {
		if err := e.resetPerKey(ctx, b.keys); err != nil {
			return res, fmt.Errorf("reset: %w", err)
		}
		e.waitIdle(ctx, c)
	}
	s0, counted, err := e.serverCount(ctx, c)
	if err != nil {
		return res, err
	}
	storage := registrytest.NewMemory()
	var insts []*perKeyInst
	defer func() {
		for _, in := range insts {
			in.close()
		}
	}()
	for range perKeyInstances {
		in, err := b.open(v, storage, cfg)
		if err != nil {
			return res, err
		}
		insts = append(insts, in)
	}
	stmts := func() int64 {
		var n int64
		for _, in := range insts {
			if in.c == nil {
				return -1
			}
			n += in.c.n.Load()
		}
		return n
	}

	f0 := b.errors.Load()
	meas := b.measure(ctx, insts, cfg.warmup, cfg.duration, stmts)
	for _, in := range insts {
		if err := in.close(); err != nil {
			e.logf("%s: close: %v", b.name, err)
		}
	}
	insts = nil

	violations := b.violations.Load()
	if v.server == "postgres" {
		// Every call that returned nil counted once: no lost update.
		n, err := e.perKeySum(ctx)
		if err != nil {
			return res, err
		}
		if n != b.ok.Load() {
			e.logf("%s: the counters sum to %d, %d handler calls succeeded", b.name, n, b.ok.Load())
			violations += abs(n - b.ok.Load())
		}
		if counted {
			e.waitIdle(ctx, c)
			s1, _, err := e.serverCount(ctx, c)
			if err != nil {
				return res, err
			}
			if tot := b.ok.Load(); tot > 0 {
				res.ServerPerOp = fp(float64(s1-s0) / float64(tot))
			}
		}
	}
	slices.Sort(meas.lat)
	res.OpsPerSec = fp(float64(meas.ok) / meas.elapsed.Seconds())
	res.MsgsPerSec = res.OpsPerSec
	res.HandleP50us, res.HandleP99us = us(pct(meas.lat, 50)), us(pct(meas.lat, 99))
	if meas.stmts >= 0 && meas.ok > 0 {
		res.StmtsPerOp = fp(float64(meas.stmts) / float64(meas.ok))
	}
	res.Instances, res.Workers = ip(perKeyInstances), ip(perKeyWorkers)
	if v.server == "postgres" {
		res.Pool = ip(perKeyWorkers)
		res.Listen = &cfg.groupListen
	}
	res.Messages = ip(b.ok.Load())
	res.HandleRetries = ip(meas.failed)
	res.Errors = ip(b.errors.Load() - f0)
	res.Violations = ip(violations)
	return res, nil
}

// perKeyPhase is what the measured window counted.
type perKeyPhase struct {
	ok, failed int64
	stmts      int64 // -1 where the driver is not traced
	lat        []time.Duration
	elapsed    time.Duration
}

// measure runs every instance's workers for warmup and then the measured
// window d: each calls the instance's handler with a new message of a
// random key (the worker's own in perKeyDistinct) until the window is over. The
// counts are read at the window's edges, with calls in flight at both,
// so that a call straddling an edge is counted where it ends and its
// statements where they are sent; latencies are those of the calls within
// the window.
func (b *perKeyBench) measure(ctx context.Context, insts []*perKeyInst, warmup, d time.Duration, stmts func() int64) perKeyPhase {
	var (
		stopped   atomic.Bool
		recording atomic.Bool
		ok        atomic.Int64
		failed    atomic.Int64
		mu        sync.Mutex
		lat       []time.Duration
		wg        sync.WaitGroup
	)
	for i, in := range insts {
		for w := range perKeyWorkers {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(i*perKeyWorkers+w)))
				var mine []time.Duration
				own := "worker-" + strconv.Itoa(i*perKeyWorkers+w)
				for !stopped.Load() {
					k := b.keys[rng.IntN(perKeyKeys)]
					m := message.NewMessage("bench", nil)
					m.Metadata.Set("counter", k)
					if b.mode == perKeyDistinct {
						k = own
					}
					m.Metadata.Set("entity_id", k)
					m.SetContext(ctx)
					rec := recording.Load()
					t0 := time.Now()
					_, err := in.handle(m)
					took := time.Since(t0)
					if err != nil {
						failed.Add(1)
						b.e.logf("%s: %v", b.name, err)
						continue
					}
					b.ok.Add(1)
					ok.Add(1)
					if rec && !stopped.Load() {
						mine = append(mine, took)
					}
				}
				mu.Lock()
				lat = append(lat, mine...)
				mu.Unlock()
			})
		}
	}
	time.Sleep(warmup)
	ok0, f0, m0 := ok.Load(), failed.Load(), stmts()
	recording.Store(true)
	start := time.Now()
	time.Sleep(d)
	st := perKeyPhase{ok: ok.Load() - ok0, failed: failed.Load() - f0, elapsed: time.Since(start), stmts: -1}
	if m1 := stmts(); m0 >= 0 {
		st.stmts = m1 - m0
	}
	stopped.Store(true)
	wg.Wait()
	st.lat = lat
	return st
}

// perKeySection writes the scenario's table with the report's section
// function.
func perKeySection(section func(s, title, header string, row func(r result) string)) {
	section(perKeyScenario, fmt.Sprintf("perkey: %d instances × %d workers, %d keys, handler called directly: alone (plain), behind lockmw.PerKey, and behind it with a key per worker (distinct)",
		perKeyInstances, perKeyWorkers, perKeyKeys),
		"| contestant | msgs/s | handler p50 / p99 µs | failed calls | errors | stmts/msg (client) | server/msg | violations |",
		func(r result) string {
			return strings.Join([]string{f(r.MsgsPerSec, 0), f(r.HandleP50us, 0) + " / " + f(r.HandleP99us, 0),
				i64(r.HandleRetries), i64(r.Errors), f(r.StmtsPerOp, 2), f(r.ServerPerOp, 2), i64(r.Violations)}, " | ")
		})
}

// perKeyBrief is the progress line of a perkey result.
func perKeyBrief(r result) string {
	return f(r.MsgsPerSec, 0) + " msgs/s, p50 " + f(r.HandleP50us, 0) + " µs, stmts/msg " + f(r.StmtsPerOp, 2) +
		", violations " + i64(r.Violations)
}

package main

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockreg/lockreg/registry"
)

// result is one contestant's outcome in one scenario. Pointer fields are
// absent where they do not apply.
type result struct {
	Scenario   string   `json:"scenario"`
	Contestant string   `json:"contestant"`
	Skipped    string   `json:"skipped,omitempty"`
	OpsPerSec  *float64 `json:"ops_per_sec,omitempty"`
	AcqP50us   *float64 `json:"acquire_p50_us,omitempty"`
	AcqP99us   *float64 `json:"acquire_p99_us,omitempty"`
	RelP50us   *float64 `json:"release_p50_us,omitempty"`
	RelP99us   *float64 `json:"release_p99_us,omitempty"`
	HandP50ms  *float64 `json:"handoff_p50_ms,omitempty"`
	HandP90ms  *float64 `json:"handoff_p90_ms,omitempty"`
	HandP99ms  *float64 `json:"handoff_p99_ms,omitempty"`
	HandMaxms  *float64 `json:"handoff_max_ms,omitempty"`
	Handoffs   *int64   `json:"handoffs,omitempty"`
	// HoldMeanms is the mean time from an acquisition's return to its
	// holder's unlock call: -hold and what the holder's wake-up added.
	HoldMeanms *float64 `json:"hold_mean_ms,omitempty"`
	// Early counts hand-offs whose acquisition returned before the
	// previous holder's release call did (the server granted the lock
	// first); their latency counts as 0.
	Early      *int64   `json:"handoffs_before_release_returned,omitempty"`
	WaitP99ms  *float64 `json:"wait_p99_ms,omitempty"`
	WaitMaxms  *float64 `json:"wait_max_ms,omitempty"`
	PerInst    []int64  `json:"acquisitions_per_instance,omitempty"`
	Fairness   *float64 `json:"fairness,omitempty"`
	StmtsPerOp *float64 `json:"stmts_per_op,omitempty"`
	StmtsPerS  *float64 `json:"stmts_per_sec,omitempty"`
	// ServerPerOp is the server's count per operation over the whole
	// life of the instances (warm-up included): PostgreSQL transactions,
	// MariaDB Com_* statements.
	ServerPerOp *float64 `json:"server_per_op,omitempty"`
	Retries     *int64   `json:"serialization_retries,omitempty"`
	Errors      *int64   `json:"errors,omitempty"`
	Violations  *int64   `json:"violations,omitempty"`
	NsPerOp     *float64 `json:"ns_per_op,omitempty"`
	// RelToDefault is the otel scenario's cycles/s relative to the
	// variant without telemetry.
	RelToDefault *float64 `json:"relative_to_default,omitempty"`
	BytesPerOp   *float64 `json:"bytes_per_lock,omitempty"`

	// The aggregator and resequencer scenarios (groups.go). OpsPerSec is
	// also set to MsgsPerSec; StmtsPerOp and ServerPerOp are per message.
	MsgsPerSec *float64 `json:"msgs_per_sec,omitempty"`
	// CommitsPerOp counts, per message in the measured window, the
	// commits the clients sent: COMMITs and statements outside a
	// transaction.
	CommitsPerOp *float64 `json:"commits_per_op,omitempty"`
	// GroupLock names the lock that protected the groups.
	GroupLock   string   `json:"group_lock,omitempty"`
	HandleP50us *float64 `json:"handle_p50_us,omitempty"`
	HandleP99us *float64 `json:"handle_p99_us,omitempty"`
	Instances   *int64   `json:"instances,omitempty"`
	Workers     *int64   `json:"workers_per_instance,omitempty"`
	Pool        *int64   `json:"pool_per_instance,omitempty"`
	Listen      *bool    `json:"listen,omitempty"`
	// Partitioned is set where -group-partition gave each instance of a
	// variant with several its own groups' messages.
	Partitioned     bool   `json:"partitioned_feed,omitempty"`
	Messages        *int64 `json:"messages_handled,omitempty"` // whole life, warm-up included
	GroupsCompleted *int64 `json:"groups_completed,omitempty"`
	Outputs         *int64 `json:"outputs,omitempty"`
	ExpectedOutputs *int64 `json:"expected_outputs,omitempty"`
	// HandleRetries counts Handle calls that returned an error, from the
	// measured window on; their messages were requeued.
	HandleRetries *int64 `json:"handle_retries,omitempty"`
	FeedRanOut    bool   `json:"feed_ran_out,omitempty"`

	// The scheduler scenarios (scheduler*.go): handler calls, and the
	// executions scheduled (the drain's backlog); OpsPerSec is
	// executions/s, StmtsPerOp and CommitsPerOp per execution, over the
	// measured window; Violations count executions run twice, never, or
	// not scheduled. Wake says how the instances learn of new executions.
	Executions *int64 `json:"executions,omitempty"`
	Backlog    *int64 `json:"backlog,omitempty"`
	Wake       string `json:"wake,omitempty"`
	// StartP50ms and StartP99ms (scheduler-latency) are the times from the
	// return of a schedule's commit to the start of its handler, over
	// Samples executions; StartEarly of them started before the commit
	// returned, and count 0.
	StartP50ms *float64 `json:"start_p50_ms,omitempty"`
	StartP99ms *float64 `json:"start_p99_ms,omitempty"`
	Samples    *int64   `json:"samples,omitempty"`
	StartEarly *int64   `json:"started_before_commit_returned,omitempty"`
	// Queued (scheduler-continuous) is the executions scheduled and not
	// yet run at the end of the measured window: near 0, the producer,
	// not the contestant, set the rate.
	Queued *int64 `json:"queued_at_end,omitempty"`

	// ServerUsPerStmt is the mean execution time of the benchmark
	// database's statements (pg_stat_statements, over the instances' whole
	// life); ServerStmts are those statements, by calls.
	ServerUsPerStmt *float64   `json:"server_exec_us_per_stmt,omitempty"`
	ServerStmts     []stmtStat `json:"server_statements,omitempty"`
	// AcqMeanus and RelMeanus are the mean lock and unlock calls;
	// ClientUsPerOp is the mean wall time of a lock or unlock call as a
	// caller sees it (parallel: goroutines × window / calls).
	AcqMeanus     *float64 `json:"acquire_mean_us,omitempty"`
	RelMeanus     *float64 `json:"release_mean_us,omitempty"`
	ClientUsPerOp *float64 `json:"client_us_per_op,omitempty"`

	// Floor names the durable floor of the result's scenario and server
	// (floors.go) that ran in the same run; FloorRatio is ops/s ÷ the
	// floor's, and for the aggregator and resequencer FloorInsertRatio
	// the ratio to floor-insert.
	Floor            string   `json:"floor,omitempty"`
	FloorRatio       *float64 `json:"floor_ratio,omitempty"`
	FloorInsertRatio *float64 `json:"floor_insert_ratio,omitempty"`

	handoffs []time.Duration // sorted cross-instance hand-offs, for the plot
}

// mean returns the mean of samples.
func mean(samples []time.Duration) time.Duration {
	if len(samples) == 0 {
		return 0
	}
	var t time.Duration
	for _, d := range samples {
		t += d
	}
	return t / time.Duration(len(samples))
}

func fp(v float64) *float64 { return &v }
func ip(v int64) *int64     { return &v }

func us(d time.Duration) *float64 { return fp(float64(d) / float64(time.Microsecond)) }
func ms(d time.Duration) *float64 { return fp(float64(d) / float64(time.Millisecond)) }

// pct returns the p-th percentile (nearest rank) of sorted samples.
func pct(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p/100+0.999999) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// harness is the measurement harness around one scenario of one contestant:
// reset the tables, read the server's counter, open the instances, run
// body, close the instances, read the counter again once flushed.
type harness struct {
	e     *env
	c     contestant
	cfg   config
	insts []instance

	serverUs    *float64 // pg_stat_statements' mean execution time
	serverStmts []stmtStat
}

// fill sets the server's statement times of res.
func (r *harness) fill(res *result) {
	res.ServerUsPerStmt, res.ServerStmts = r.serverUs, r.serverStmts
}

func (r *harness) open(ctx context.Context, n, pool int) error {
	for range n {
		in, err := r.c.open(ctx, r.e, pool)
		if err != nil {
			return err
		}
		r.insts = append(r.insts, in)
	}
	return nil
}

func (r *harness) stmts() int64 {
	var n int64
	for _, in := range r.insts {
		s := in.stmts()
		if s < 0 {
			return -1
		}
		n += s
	}
	return n
}

func (r *harness) closeAll() {
	for _, in := range r.insts {
		if err := in.close(); err != nil {
			r.e.logf("%s: close: %v", r.c.name, err)
		}
	}
	r.insts = nil
}

// measure wraps body with the reset and the server counts; body returns
// the operations it did over the instances' whole life (warm-up included).
func (r *harness) measure(ctx context.Context, body func() (int64, error)) (serverPerOp *float64, err error) {
	if err := r.e.reset(ctx, r.c); err != nil {
		return nil, fmt.Errorf("reset: %w", err)
	}
	r.e.waitIdle(ctx, r.c)
	s0, ok, err := r.e.serverCount(ctx, r.c)
	if err != nil {
		return nil, err
	}
	r.e.resetStatements(ctx, r.c)
	ops, err := body()
	r.closeAll()
	if err != nil {
		return nil, err
	}
	r.e.waitIdle(ctx, r.c)
	r.serverUs, r.serverStmts = r.e.statements(ctx, r.c)
	if ok && ops > 0 {
		r.e.waitIdle(ctx, r.c)
		s1, _, err := r.e.serverCount(ctx, r.c)
		if err != nil {
			return nil, err
		}
		return fp(float64(s1-s0) / float64(ops)), nil
	}
	return nil, nil
}

// key names a key of a contestant and scenario, distinct across both.
func key(c contestant, scenario string, i int) string {
	return "bench/" + c.name + "/" + scenario + "/" + strconv.Itoa(i)
}

// uncontended: one goroutine, one key.
func uncontended(ctx context.Context, e *env, c contestant, cfg config) (result, error) {
	res := result{Scenario: "uncontended", Contestant: c.name}
	r := &harness{e: e, c: c, cfg: cfg}
	var acq, rel []time.Duration
	var elapsed time.Duration
	var n, stmts int64 = 0, -1
	server, err := r.measure(ctx, func() (int64, error) {
		if err := r.open(ctx, 1, 4); err != nil {
			return 0, err
		}
		l, err := r.insts[0].locker(ctx, key(c, "uncontended", 0))
		if err != nil {
			return 0, err
		}
		var total int64
		cycle := func() (time.Duration, time.Duration, error) {
			t0 := time.Now()
			if err := l.lock(ctx); err != nil {
				return 0, 0, fmt.Errorf("lock: %w", err)
			}
			t1 := time.Now()
			if err := l.unlock(ctx); err != nil {
				return 0, 0, fmt.Errorf("unlock: %w", err)
			}
			total++
			return t1.Sub(t0), time.Since(t1), nil
		}
		for end := time.Now().Add(cfg.warmup); time.Now().Before(end); {
			if _, _, err := cycle(); err != nil {
				return total, err
			}
		}
		s0 := r.stmts()
		start := time.Now()
		for end := start.Add(cfg.duration); time.Now().Before(end); {
			a, b, err := cycle()
			if err != nil {
				return total, err
			}
			acq, rel = append(acq, a), append(rel, b)
		}
		elapsed = time.Since(start)
		if s0 >= 0 {
			stmts = r.stmts() - s0
		}
		n = int64(len(acq))
		return total, nil
	})
	if err != nil {
		return res, err
	}
	slices.Sort(acq)
	slices.Sort(rel)
	res.OpsPerSec = fp(float64(n) / elapsed.Seconds())
	res.AcqP50us, res.AcqP99us = us(pct(acq, 50)), us(pct(acq, 99))
	res.RelP50us, res.RelP99us = us(pct(rel, 50)), us(pct(rel, 99))
	res.AcqMeanus, res.RelMeanus = us(mean(acq)), us(mean(rel))
	res.ClientUsPerOp = us((mean(acq) + mean(rel)) / 2)
	res.ServerPerOp = server
	r.fill(&res)
	if stmts >= 0 && n > 0 {
		res.StmtsPerOp = fp(float64(stmts) / float64(n))
	}
	if res.StmtsPerOp == nil && server != nil && c.server == "mariadb" {
		res.StmtsPerOp = server // Com_* counts statements
	}
	retries(r, &res)
	return res, nil
}

func retries(r *harness, res *result) {
	var n int64
	found := false
	for _, in := range r.insts {
		if s, ok := in.(*springInst); ok {
			n += s.retries.Load()
			found = true
		}
	}
	if found {
		res.Retries = ip(n)
	}
}

// parallel: goroutines on distinct keys of one instance.
func parallel(ctx context.Context, e *env, c contestant, cfg config) (result, error) {
	res := result{Scenario: "parallel", Contestant: c.name}
	r := &harness{e: e, c: c, cfg: cfg}
	var ops, errs, stmts int64 = 0, 0, -1
	var elapsed time.Duration
	var retried int64
	server, err := r.measure(ctx, func() (int64, error) {
		if err := r.open(ctx, 1, cfg.goroutines); err != nil {
			return 0, err
		}
		var total, errCount atomic.Int64
		lockers := make([]locker, cfg.goroutines)
		for i := range lockers {
			l, err := r.insts[0].locker(ctx, key(c, "parallel", i))
			if err != nil {
				return 0, err
			}
			lockers[i] = l
		}
		rctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		for _, l := range lockers {
			wg.Go(func() {
				for rctx.Err() == nil {
					if err := l.lock(rctx); err != nil {
						if rctx.Err() == nil {
							errCount.Add(1)
							e.logf("%s parallel: lock: %v", c.name, err)
							sleep(rctx, 10*time.Millisecond)
						}
						continue
					}
					if err := l.unlock(context.Background()); err != nil {
						errCount.Add(1)
						e.logf("%s parallel: unlock: %v", c.name, err)
					}
					total.Add(1)
				}
			})
		}
		time.Sleep(cfg.warmup)
		n0, s0, start := total.Load(), r.stmts(), time.Now()
		time.Sleep(cfg.duration)
		n1, s1 := total.Load(), r.stmts()
		elapsed = time.Since(start)
		cancel()
		wg.Wait()
		ops = n1 - n0
		if s0 >= 0 {
			stmts = s1 - s0
		}
		errs = errCount.Load()
		for _, in := range r.insts {
			if s, ok := in.(*springInst); ok {
				retried = s.retries.Load()
			}
		}
		return total.Load(), nil
	})
	if err != nil {
		return res, err
	}
	res.OpsPerSec = fp(float64(ops) / elapsed.Seconds())
	if ops > 0 {
		res.ClientUsPerOp = us(time.Duration(float64(elapsed) * float64(cfg.goroutines) / float64(2*ops)))
	}
	res.ServerPerOp = server
	r.fill(&res)
	if stmts >= 0 && ops > 0 {
		res.StmtsPerOp = fp(float64(stmts) / float64(ops))
	}
	res.Errors = ip(errs)
	if c.name == "spring-serializable" || c.name == "spring-rc" {
		res.Retries = ip(retried)
	}
	return res, nil
}

// cache: Obtain on distinct keys of a fresh registry; time per call and heap
// per cached idle lock object (keys are built beforehand and not counted).
func cache(ctx context.Context, e *env, c contestant, cfg config) (result, error) {
	res := result{Scenario: "cache", Contestant: c.name}
	keys := make([]string, cfg.cacheKeys)
	for i := range keys {
		keys[i] = key(c, "cache", i)
	}
	obtainAll := func() (*registry.Registry, instance, time.Duration, error) {
		in, err := c.open(ctx, e, 4)
		if err != nil {
			return nil, nil, 0, err
		}
		li, ok := in.(*lockregInst)
		if !ok {
			in.close()
			return nil, nil, 0, errors.New("not a lockreg contestant")
		}
		t0 := time.Now()
		for _, k := range keys {
			li.reg.Obtain(k)
		}
		return li.reg, in, time.Since(t0), nil
	}
	// First pass: time.
	_, in, d, err := obtainAll()
	if err != nil {
		return res, err
	}
	in.close()
	// Second pass: memory. Two collections before each reading: the
	// first leaves sync.Pool's victim caches live, and the second frees
	// them, so that pooled buffers of earlier work do not count (the
	// difference came out negative under load).
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m0)
	reg, in, _, err := obtainAll()
	if err != nil {
		return res, err
	}
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m1)
	runtime.KeepAlive(reg)
	runtime.KeepAlive(keys)
	in.close()
	n := float64(len(keys))
	res.NsPerOp = fp(float64(d.Nanoseconds()) / n)
	res.OpsPerSec = fp(n / d.Seconds())
	res.BytesPerOp = fp((float64(m1.HeapAlloc) - float64(m0.HeapAlloc)) / n)
	return res, nil
}

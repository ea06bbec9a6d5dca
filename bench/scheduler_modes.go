package main

// The three ways the scheduler scenarios measure a contestant.

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// snapshot is the work done and the statements sent at one moment.
type snapshot struct {
	done, stmts, commits int64
	at                   time.Time
}

func snap(sys schedSystem) snapshot {
	st, co := sys.base().s.counts()
	return snapshot{done: sys.base().t.done.Load(), stmts: st, commits: co, at: time.Now()}
}

// measured is one mode's outcome: the measured window from a to b, the
// executions scheduled in all, and for latency the sorted
// schedule-to-start times of the window's executions.
type measured struct {
	a, b      snapshot
	scheduled int
	latencies []time.Duration
	early     int64  // latency: handlers that started before the schedule's commit returned
	queued    *int64 // continuous: executions scheduled and not yet run at the window's end
}

// fill writes m into res: rates and counts per execution over the
// window; violations are executions run twice, never, or not ours.
func (m measured) fill(res *result, t *tally, errs int64) {
	res.Executions = ip(t.done.Load())
	res.Backlog = ip(int64(m.scheduled))
	res.Errors = ip(errs)
	res.Violations = ip(t.dups.Load() + t.missing(m.scheduled) + t.strays.Load())
	n, d := m.b.done-m.a.done, m.b.at.Sub(m.a.at)
	if d > 0 {
		res.OpsPerSec = fp(float64(n) / d.Seconds())
	}
	if n > 0 {
		res.StmtsPerOp = fp(float64(m.b.stmts-m.a.stmts) / float64(n))
		res.CommitsPerOp = fp(float64(m.b.commits-m.a.commits) / float64(n))
	}
	res.Queued = m.queued
	if len(m.latencies) > 0 {
		res.StartP50ms, res.StartP99ms = ms(pct(m.latencies, 50)), ms(pct(m.latencies, 99))
		res.Samples, res.StartEarly = ip(int64(len(m.latencies))), ip(m.early)
	}
}

// ids returns from, from+1, ..., to-1.
func ids(from, to int) []int {
	s := make([]int, 0, to-from)
	for i := from; i < to; i++ {
		s = append(s, i)
	}
	return s
}

// runDrain inserts backlog due executions, then starts the instances and
// times them from the start until the last execution is run and written.
func runDrain(ctx context.Context, sys schedSystem, t *tally, backlog int) (measured, error) {
	m := measured{scheduled: backlog}
	for i := 0; i < backlog; i += 5000 {
		if err := sys.schedule(ctx, ids(i, min(backlog, i+5000))); err != nil {
			return m, fmt.Errorf("inserting the backlog: %w", err)
		}
	}
	if err := sys.base().ready(ctx, sys.base().table); err != nil {
		return m, err
	}
	m.a = snap(sys)
	if err := sys.start(ctx); err != nil {
		return m, err
	}
	defer sys.stop()
	err := waitDrained(ctx, sys, t, backlog, schedTimeout(backlog))
	m.b = snap(sys)
	return m, err
}

// runContinuous starts the instances and a producer that keeps up to
// min(schedQueued, -scheduler-backlog) executions scheduled and not yet
// run, inserting them due now in batches of a tenth of that; it measures
// the executions run in cfg.duration after cfg.warmup, then stops the
// producer and waits until every execution scheduled has run.
func runContinuous(ctx context.Context, sys schedSystem, t *tally, cfg config) (measured, error) {
	var m measured
	if err := sys.base().ready(ctx, sys.base().table); err != nil {
		return m, err
	}
	if err := sys.start(ctx); err != nil {
		return m, err
	}
	defer sys.stop()
	queued := min(schedQueued, cfg.schedBacklog)
	batch := max(1, queued/10)
	var (
		stop      atomic.Bool
		scheduled atomic.Int64
		perr      error
		wg        sync.WaitGroup
	)
	wg.Go(func() { // the producer; stopped by stop, never mid-insert
		for next := 0; !stop.Load(); {
			if int64(next)-t.done.Load() > int64(queued-batch) {
				time.Sleep(time.Millisecond)
				continue
			}
			if perr = sys.schedule(ctx, ids(next, next+batch)); perr != nil {
				return
			}
			next += batch
			scheduled.Store(int64(next))
		}
	})
	err := sleep(ctx, cfg.warmup)
	m.a = snap(sys)
	if err == nil {
		err = sleep(ctx, cfg.duration)
	}
	m.b = snap(sys)
	m.queued = ip(scheduled.Load() - m.b.done)
	stop.Store(true)
	wg.Wait()
	if err == nil && perr != nil {
		err = fmt.Errorf("producer: %w", perr)
	}
	m.scheduled = int(scheduled.Load())
	if err == nil {
		err = waitDrained(ctx, sys, t, m.scheduled, schedTimeout(m.scheduled))
	}
	return m, err
}

// runLatency starts the instances and schedules one execution due now
// every 1/schedRate s, each in its own statement, for cfg.warmup +
// cfg.duration; after the last has run it takes the times from the
// return of each schedule's commit to the start of its handler, for the
// executions scheduled after the warm-up. A handler that started before
// the commit returned counts 0 (and as early).
func runLatency(ctx context.Context, sys schedSystem, t *tally, cfg config) (measured, error) {
	var m measured
	if err := sys.base().ready(ctx, sys.base().table); err != nil {
		return m, err
	}
	if err := sys.start(ctx); err != nil {
		return m, err
	}
	defer sys.stop()
	tick := time.NewTicker(time.Second / schedRate)
	defer tick.Stop()
	began := time.Now()
	warm, end := began.Add(cfg.warmup), began.Add(cfg.warmup+cfg.duration)
	first := -1
	for id := 0; time.Now().Before(end); id++ {
		select {
		case <-tick.C:
		case <-ctx.Done():
			return m, ctx.Err()
		}
		if first < 0 && time.Now().After(warm) {
			first, m.a = id, snap(sys)
		}
		if err := sys.schedule(ctx, []int{id}); err != nil {
			return m, fmt.Errorf("schedule: %w", err)
		}
		t.commit(id, time.Now())
		m.scheduled = id + 1
	}
	if first < 0 {
		return m, fmt.Errorf("nothing scheduled after the warm-up of %v", cfg.warmup)
	}
	err := waitDrained(ctx, sys, t, m.scheduled, schedTimeout(m.scheduled))
	m.b = snap(sys)
	m.latencies, m.early = t.latencies(first, m.scheduled)
	return m, err
}

// latencies are the sorted start − commit times of ids [from, to) that
// ran, 0 where the start came first, and how many did.
func (t *tally) latencies(from, to int) ([]time.Duration, int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var (
		out   []time.Duration
		early int64
	)
	for id := from; id < min(to, len(t.started)); id++ {
		if t.started[id].IsZero() || t.committed[id].IsZero() {
			continue
		}
		d := t.started[id].Sub(t.committed[id])
		if d < 0 {
			d, early = 0, early+1
		}
		out = append(out, d)
	}
	slices.Sort(out)
	return out, early
}

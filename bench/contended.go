package main

// The contended scenario: instances taking turns on one key, with the
// hand-off latency, fairness and the safety check of mutual exclusion.

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// acquisition is one hold of the contended key.
type acquisition struct {
	inst              int
	called, acquired  time.Time
	unlocking         time.Time // when the holder called unlock; zero until then
	released          time.Time // zero until the release returned
	violatedExclusion bool
}

// contended: instances with their own pools and client ids loop lock / hold
// / unlock on one key; an in-process counter checks mutual exclusion.
func contended(ctx context.Context, e *env, c contestant, cfg config) (cont, safety result, err error) {
	cont = result{Scenario: "contended", Contestant: c.name}
	safety = result{Scenario: "safety", Contestant: c.name}
	r := &harness{e: e, c: c, cfg: cfg}
	var (
		mu         sync.Mutex
		acqs       []*acquisition
		holders    atomic.Int32
		violations atomic.Int64
		errCount   atomic.Int64
		start, end time.Time
		stmts      int64 = -1
	)
	server, err := r.measure(ctx, func() (int64, error) {
		if err := r.open(ctx, cfg.instances, 4); err != nil {
			return 0, err
		}
		lockers := make([]locker, cfg.instances)
		for i, in := range r.insts {
			l, err := in.locker(ctx, key(c, "contended", 0))
			if err != nil {
				return 0, err
			}
			lockers[i] = l
		}
		rctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		for i, l := range lockers {
			wg.Go(func() {
				for rctx.Err() == nil {
					called := time.Now()
					if err := l.lock(rctx); err != nil {
						if rctx.Err() == nil {
							errCount.Add(1)
							e.logf("%s contended: lock: %v", c.name, err)
							sleep(rctx, 10*time.Millisecond)
						}
						continue
					}
					a := &acquisition{inst: i, called: called, acquired: time.Now()}
					if holders.Add(1) != 1 {
						violations.Add(1)
						a.violatedExclusion = true
					}
					mu.Lock()
					acqs = append(acqs, a)
					mu.Unlock()
					holdFor(cfg.hold)
					holders.Add(-1)
					unlocking := time.Now()
					mu.Lock()
					a.unlocking = unlocking
					mu.Unlock()
					if err := l.unlock(context.Background()); err != nil {
						errCount.Add(1)
						e.logf("%s contended: unlock: %v", c.name, err)
					}
					rel := time.Now()
					mu.Lock()
					a.released = rel
					mu.Unlock()
				}
			})
		}
		time.Sleep(cfg.warmup)
		s0 := r.stmts()
		start = time.Now()
		time.Sleep(cfg.duration)
		end = time.Now()
		s1 := r.stmts()
		cancel()
		wg.Wait()
		if s0 >= 0 {
			stmts = s1 - s0
		}
		mu.Lock()
		defer mu.Unlock()
		return int64(len(acqs)), nil
	})
	if err != nil {
		return cont, safety, err
	}
	slices.SortFunc(acqs, func(a, b *acquisition) int { return a.acquired.Compare(b.acquired) })
	var (
		n       int64
		held    time.Duration // the holds of acquisitions released in the window
		nHeld   int64
		perInst = make([]int64, cfg.instances)
		waits   []time.Duration
		hands   []time.Duration
		early   int64
	)
	for k, a := range acqs {
		if a.acquired.Before(start) || !a.acquired.Before(end) {
			continue
		}
		n++
		perInst[a.inst]++
		if !a.unlocking.IsZero() {
			held += a.unlocking.Sub(a.acquired)
			nHeld++
		}
		waits = append(waits, a.acquired.Sub(a.called))
		if k > 0 {
			prev := acqs[k-1]
			if prev.inst != a.inst && !prev.unlocking.IsZero() {
				if !prev.released.IsZero() && a.acquired.Before(prev.released) {
					early++
				}
				hands = append(hands, max(0, a.acquired.Sub(prev.unlocking)))
			}
		}
	}
	secs := end.Sub(start).Seconds()
	slices.Sort(waits)
	slices.Sort(hands)
	cont.OpsPerSec = fp(float64(n) / secs)
	cont.PerInst = perInst
	lo, hi := slices.Min(perInst), slices.Max(perInst)
	if hi > 0 {
		cont.Fairness = fp(float64(lo) / float64(hi))
	}
	if nHeld > 0 {
		cont.HoldMeanms = ms(held / time.Duration(nHeld))
	}
	cont.Handoffs, cont.Early = ip(int64(len(hands))), ip(early)
	if len(hands) > 0 {
		cont.HandP50ms, cont.HandP90ms = ms(pct(hands, 50)), ms(pct(hands, 90))
		cont.HandP99ms, cont.HandMaxms = ms(pct(hands, 99)), ms(hands[len(hands)-1])
	}
	cont.handoffs = hands
	if len(waits) > 0 {
		cont.WaitP99ms, cont.WaitMaxms = ms(pct(waits, 99)), ms(waits[len(waits)-1])
	}
	if stmts >= 0 {
		cont.StmtsPerS = fp(float64(stmts) / secs)
		if n > 0 {
			cont.StmtsPerOp = fp(float64(stmts) / float64(n))
		}
	}
	cont.ServerPerOp = server
	r.fill(&cont)
	cont.Errors = ip(errCount.Load())
	retries(r, &cont)
	safety.OpsPerSec = cont.OpsPerSec
	// Violations over the whole run, warm-up included.
	safety.Violations = ip(violations.Load())
	return cont, safety, nil
}

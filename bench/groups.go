package main

// The aggregator and resequencer scenarios: messages/s through the handlers'
// Handle, for lockreg only, in memory and on PostgreSQL. See "aggregator and
// resequencer" in docs/benchmarks.md.

import (
	"context"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// groupScenarios are the handler scenarios; they run the group variants,
// not the lock contestants.
var groupScenarios = []string{"aggregator", "resequencer"}

const (
	groupSize   = 10 // messages per group: sequence_number 1..10, sequence_size 10
	groupRegion = "bench-group"
	// fullGroup has bits 1..groupSize set: every message of a group.
	fullGroup = uint32(1<<(groupSize+1) - 2)
	// maxFeedGroups bounds the groups built for one measured window.
	maxFeedGroups = 200_000
	// reseqPartial is the resequencer's ReleasePartialSequences in the
	// benchmark: false, the default, releases each group whole.
	reseqPartial = false
	// drainFor bounds the handling of requeued messages after a phase.
	drainFor = 15 * time.Second
)

// A groupVariant is one deployment of the handlers under test.
type groupVariant struct {
	name      string
	server    string // "memory" or "postgres"
	instances int
	// guess is the expected rate in messages/s, only to size the warm-up
	// feed; the measured feed is sized from the warm-up's rate.
	guess float64
}

var groupVariants = []groupVariant{
	{name: "memory", server: "memory", instances: 1, guess: 150_000},
	{name: "postgres-1", server: "postgres", instances: 1, guess: 5_000},
	{name: "postgres-4", server: "postgres", instances: 4, guess: 5_000},
	{name: "mariadb-4", server: "mariadb", instances: 4, guess: 3_000},
	{name: "sqlite-1", server: "sqlite", instances: 1, guess: 3_000},
}

// variantNames are the group variants' names and the group floors'.
func variantNames() []string {
	var n []string
	for _, v := range groupVariants {
		n = append(n, v.name)
	}
	for _, f := range groupFloors {
		n = append(n, f.name)
	}
	return n
}

// workers returns the worker goroutines per instance and the pool size per
// instance of v (0 in memory).
func (v groupVariant) workers(cfg config) (workers, pool int) {
	switch v.name {
	case "memory":
		return cfg.memWorkers, 0
	case "postgres-1":
		workers = cfg.pg1Workers
	case "sqlite-1":
		workers = cfg.sqliteWorkers
	default: // postgres-4, mariadb-4
		workers = cfg.pg4Workers
	}
	if pool = cfg.groupPool; pool == 0 {
		pool = workers
	}
	return workers, pool
}

// phaseStats is what one phase of a group run counted.
type phaseStats struct {
	ok      int64           // Handle calls that returned nil, counted until the phase stopped
	lat     []time.Duration // every Handle call's latency (measured phase)
	elapsed time.Duration
	dry     bool // the feed ran out before the phase's time
}

// groupRunner runs the workers of all instances on one shared feed.
type groupRunner struct {
	e         *env
	name      string
	insts     []*groupInst
	workers   int
	states    []groupState
	retry     chan item
	total     atomic.Int64 // successful Handle calls over the whole life
	failures  atomic.Int64 // failed Handle calls over the whole life
	partition bool         // each instance has a feed of its own groups
	ctx       context.Context
}

// handle runs one Handle call and books its outcome.
func (r *groupRunner) handle(in *groupInst, it item) (time.Duration, error) {
	it.msg.SetContext(r.ctx)
	t0 := time.Now()
	err := in.handle(it.msg)
	d := time.Since(t0)
	if err != nil {
		r.failures.Add(1)
		return d, err
	}
	r.total.Add(1)
	r.states[it.group].handled.Or(1 << it.seq)
	return d, nil
}

// phase feeds the items (after any carried over) to the workers until d has
// passed or the feed is empty, then stops taking new ones and waits for the
// calls in flight. It returns the items not taken.
func (r *groupRunner) phase(items []item, d time.Duration, record bool) (phaseStats, []item) {
	parts := 1
	if r.partition {
		parts = len(r.insts)
	}
	feeds := partitionFeed(items, parts)
	var (
		stop    = make(chan struct{})
		stopped atomic.Bool
		dry     = make(chan struct{})
		dryOnce sync.Once
		ok      atomic.Int64
		mu      sync.Mutex
		lat     []time.Duration
		wg      sync.WaitGroup
	)
	for i, in := range r.insts {
		feed := feeds[i%len(feeds)]
		for range r.workers {
			wg.Go(func() {
				var mine []time.Duration
				defer func() {
					mu.Lock()
					lat = append(lat, mine...)
					mu.Unlock()
				}()
				for !stopped.Load() {
					var it item
					select {
					case it = <-r.retry:
					default:
						var more bool
						select {
						case it = <-r.retry:
						case it, more = <-feed:
							if !more {
								dryOnce.Do(func() { close(dry) })
								return
							}
						case <-stop:
							return
						}
					}
					d, err := r.handle(in, it)
					if record {
						mine = append(mine, d)
					}
					if stopped.Load() {
						if err != nil {
							r.retry <- it
						}
						return
					}
					if err != nil {
						r.e.logf("%s: Handle: %v", r.name, err)
						r.retry <- it
					} else {
						ok.Add(1)
					}
				}
			})
		}
	}
	start := time.Now()
	t := time.NewTimer(d)
	var st phaseStats
	select {
	case <-t.C:
	case <-dry:
		st.dry = true
	}
	t.Stop()
	st.ok = ok.Load()
	st.elapsed = time.Since(start)
	stopped.Store(true)
	close(stop)
	wg.Wait()
	st.lat = lat
	var rest []item
	for _, f := range feeds {
		for it := range f {
			rest = append(rest, it)
		}
	}
	return st, rest
}

// partitionFeed returns n closed channels holding items, each item in
// channel group % n: with one channel per instance, all of a group's
// messages go to one instance, as a broker's partitions keyed by
// correlation ID would deliver them.
func partitionFeed(items []item, n int) []chan item {
	feeds := make([]chan item, n)
	for i := range feeds {
		feeds[i] = make(chan item, len(items))
	}
	for _, it := range items {
		feeds[it.group%n] <- it
	}
	for _, f := range feeds {
		close(f)
	}
	return feeds
}

// drain handles the requeued messages until each has succeeded, or for at
// most drainFor; it returns the calls that failed and the messages left.
func (r *groupRunner) drain() (failed int64, left int) {
	deadline := time.Now().Add(drainFor)
	for len(r.retry) > 0 && time.Now().Before(deadline) {
		it := <-r.retry
		if _, err := r.handle(r.insts[it.group%len(r.insts)], it); err != nil {
			failed++
			r.e.logf("%s: Handle (drain): %v", r.name, err)
			r.retry <- it
			time.Sleep(10 * time.Millisecond)
		}
	}
	return failed, len(r.retry)
}

// groupRun runs scenario ("aggregator" or "resequencer") for variant v.
func groupRun(ctx context.Context, e *env, scenario string, v groupVariant, cfg config) (result, error) {
	res := result{Scenario: scenario, Contestant: v.name}
	workers, pool := v.workers(cfg)
	c := contestant{name: v.name, server: v.server}
	if v.server != "memory" {
		if err := e.unavailable(c); err != nil {
			res.Skipped = err.Error()
			return res, nil
		}
		if err := e.resetGroups(ctx, v.server); err != nil {
			return res, fmt.Errorf("reset: %w", err)
		}
		e.waitIdle(ctx, c)
	}
	// MariaDB's Com_* counters are the whole server's: other clients' work
	// would count; only PostgreSQL's per-database count is taken.
	s0, counted, err := e.serverCount(ctx, c)
	if err != nil {
		return res, err
	}
	counted = counted && v.server == "postgres"

	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	prefix := "bench/" + scenario + "/" + v.name + "/" + strconv.FormatInt(time.Now().UnixNano(), 36) + "/"
	w := cfg.groupWindow
	warmGroups := roundBlocks(int(v.guess*cfg.warmup.Seconds()*1.5/groupSize), w)
	pub := &countingPub{scenario: scenario, prefix: prefix, states: make([]groupState, warmGroups+maxFeedGroups+w)}
	disc := &discardPub{}
	var logged atomic.Int64
	r := &groupRunner{e: e, name: scenario + "/" + v.name, workers: workers, states: pub.states, partition: cfg.groupPartition,
		retry: make(chan item, 1<<16), ctx: ctx}
	defer func() {
		for _, in := range r.insts {
			if err := in.close(); err != nil {
				e.logf("%s: close: %v", r.name, err)
			}
		}
	}()
	for range v.instances {
		in, err := openGroupInst(e, scenario, v, cfg, pub, disc, &logged)
		if err != nil {
			return res, err
		}
		r.insts = append(r.insts, in)
	}
	stmts := func() (n, commits int64) {
		for _, in := range r.insts {
			if in.c == nil {
				return -1, -1
			}
			n += in.c.n.Load()
			commits += in.c.commits.Load()
		}
		return n, commits
	}

	// Warm-up, on a feed sized by a guess of the rate; it also measures the
	// rate that sizes the measured feed, built before the clock starts.
	warm, rest := r.phase(buildFeed(prefix, 0, warmGroups, w, rng), cfg.warmup, false)
	r.drain()
	if v.server == "postgres" {
		if err := e.analyzeGroups(ctx); err != nil {
			return res, err
		}
	}
	rate := float64(warm.ok) / warm.elapsed.Seconds()
	n := roundBlocks(min(int(rate*cfg.duration.Seconds()*2/groupSize), maxFeedGroups), w)
	feed := append(rest, buildFeed(prefix, warmGroups, n, w, rng)...)
	m0, c0 := stmts()
	f0 := r.failures.Load()
	meas, _ := r.phase(feed, cfg.duration, true)
	m1, c1 := stmts()
	_, left := r.drain()
	if meas.dry {
		e.logf("%s: the feed of %d messages ran out after %v (warm-up rate %.0f/s)", r.name, len(feed), meas.elapsed, rate)
	}
	retried := r.failures.Load() - f0 // failed calls from the measured phase on, drain included

	// Close the instances so that PostgreSQL flushes its statistics.
	for _, in := range r.insts {
		if err := in.close(); err != nil {
			e.logf("%s: close: %v", r.name, err)
		}
	}
	r.insts = nil
	if counted {
		e.waitIdle(ctx, c)
		s1, _, err := e.serverCount(ctx, c)
		if err != nil {
			return res, err
		}
		if tot := r.total.Load(); tot > 0 {
			res.ServerPerOp = fp(float64(s1-s0) / float64(tot))
		}
	}

	// Check the outputs against what was handled.
	var (
		completed, expected, violations int64
		used                            = warmGroups + n
	)
	for g := range used {
		st := &pub.states[g]
		h := st.handled.Load()
		out := int64(st.outputs.Load())
		complete := h == fullGroup
		if complete {
			completed++
		}
		switch scenario {
		case "aggregator":
			want := int64(0)
			if complete {
				want = 1
			}
			expected += want
			violations += abs(out - want)
		case "resequencer":
			var want uint32
			switch {
			case reseqPartial:
				want = h | 1
				want = ^want & (want + 1) // the lowest unset bit
				want = (want - 1) &^ 1    // bits 1..that bit-1: the contiguous prefix
			case complete:
				want = fullGroup
			}
			expected += int64(bits.OnesCount32(want))
			pubd := st.published.Load()
			violations += int64(bits.OnesCount32(pubd^want)) + int64(st.disorder.Load()) + int64(st.dups.Load())
		}
	}
	violations += disc.n.Load() + pub.foreign.Load() + int64(left)
	if violations > 0 {
		e.logf("%s: %d violations: outputs %d, expected %d, discarded %d, unknown %d, messages never handled %d",
			r.name, violations, pub.total.Load(), expected, disc.n.Load(), pub.foreign.Load(), left)
	}

	slices.Sort(meas.lat)
	res.OpsPerSec = fp(float64(meas.ok) / meas.elapsed.Seconds())
	res.MsgsPerSec = res.OpsPerSec
	res.HandleP50us, res.HandleP99us = us(pct(meas.lat, 50)), us(pct(meas.lat, 99))
	if m0 >= 0 && meas.ok > 0 {
		res.StmtsPerOp = fp(float64(m1-m0) / float64(meas.ok))
		res.CommitsPerOp = fp(float64(c1-c0) / float64(meas.ok))
	}
	res.Instances, res.Workers = ip(int64(v.instances)), ip(int64(workers))
	if pool > 0 {
		res.Pool = ip(int64(pool))
	}
	if v.server == "postgres" {
		res.Listen = &cfg.groupListen
	}
	res.GroupLock = cfg.groupLock(v)
	res.Partitioned = r.partition && v.instances > 1
	res.Outputs, res.ExpectedOutputs = ip(pub.total.Load()), ip(expected)
	res.GroupsCompleted, res.Messages = ip(completed), ip(r.total.Load())
	res.HandleRetries = ip(retried)
	res.Errors = ip(logged.Load())
	res.Violations = ip(violations)
	res.FeedRanOut = meas.dry
	return res, nil
}

// roundBlocks rounds a number of groups up to whole blocks of window
// groups, at least two.
func roundBlocks(groups, window int) int {
	return max(2, (groups+window-1)/window) * window
}

func abs(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}

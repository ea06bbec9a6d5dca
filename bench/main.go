// Command bench measures lockreg side by side with the protocols of Spring
// Integration's JDBC lock registry, ShedLock and cirello.io/pglock, with
// PostgreSQL advisory locks and with the floor of two round trips, on the
// same local databases in one run, and the throughput of lockreg's aggregator
// and resequencer handlers in memory and on PostgreSQL. See docs/benchmarks.md.
//
//	cd bench && go run . [-quick] [-only a,b] [-scenarios s,t] [-variants v,w] [-json FILE] [-plot DIR]
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strings"
	"time"
)

type config struct {
	quick      bool
	duration   time.Duration // measured time per scenario and contestant
	warmup     time.Duration
	hold       time.Duration
	instances  int
	goroutines int
	cacheKeys  int
	only       []string
	scenarios  []string
	jsonFile   string
	plotDir    string
	pgDB       string
	verbose    bool
	// ownPostgres is the port of a PostgreSQL server the benchmark starts
	// for itself with pg_stat_statements (0: LOCKREG_POSTGRES_DSN's).
	ownPostgres int
	syncCommit  string // synchronous_commit of the benchmark database; "" = the server's
	cpuProfile  string // write a CPU profile of the whole run here
	traceFile   string // write an execution trace of the whole run here

	// The aggregator and resequencer scenarios.
	variants       []string
	memWorkers     int  // memory: worker goroutines
	pg1Workers     int  // postgres-1: worker goroutines
	pg4Workers     int  // postgres-4: worker goroutines per instance
	groupPool      int  // PostgreSQL: MaxOpen = MaxIdle per instance; 0: the instance's workers
	groupListen    bool // PostgreSQL: jdbc.WithListener(pgxlisten.New(db))
	groupWindow    int  // groups per shuffled block of the feed
	groupPartition bool // each instance takes the messages of its own groups
	// sqliteWorkers are the worker goroutines of the sqlite-1 variant.
	sqliteWorkers int
	// groupLockKind is the SQL variants' group lock: "store" or "registry".
	groupLockKind string
	// groupCommit is sqlstore.Config.GroupCommit of the SQL variants.
	groupCommit int
	// lockGroupCommit is jdbc.WithGroupCommit of the lockreg contestants.
	lockGroupCommit int
	// rounds runs each lock scenario this many times, the contestants
	// interleaved in every round, and reports each contestant's median.
	rounds int
	// schedBacklog is the scheduler scenario's pre-inserted due backlog.
	schedBacklog int
	// schedOnly and schedModes select scheduler contestants and modes.
	schedOnly, schedModes []string
	// schedPoll is the polling interval of the polling scheduler
	// contestants in the latency measurement.
	schedPoll time.Duration
}

// lockScenarios run per lock contestant; the group scenarios (groups.go)
// run per group variant.
var (
	lockScenarios = []string{"uncontended", "parallel", "contended", "safety", "cache"}
	allScenarios  = append(append(slices.Clone(lockScenarios), groupScenarios...), perKeyScenario, otelScenario, schedulerScenario)
)

func main() {
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		os.Exit(2)
	}
	if cfg.cpuProfile != "" {
		startRecording("cpuprofile", cfg.cpuProfile, pprof.StartCPUProfile)
		defer pprof.StopCPUProfile()
	}
	if cfg.traceFile != "" {
		startRecording("trace", cfg.traceFile, trace.Start)
		defer trace.Stop()
	}
	if err := run(context.Background(), cfg, os.Stdout); err != nil {
		pprof.StopCPUProfile()
		trace.Stop()
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// startRecording creates file and starts recording into it with start (a
// CPU profile, a trace), or exits naming the flag.
func startRecording(flagName, file string, start func(io.Writer) error) {
	f, err := os.Create(file)
	if err == nil {
		err = start(f)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: -%s: %v\n", flagName, err)
		os.Exit(2)
	}
}

func parseFlags(args []string, errOut io.Writer) (config, error) {
	var cfg config
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(errOut)
	fs.BoolVar(&cfg.quick, "quick", false, "every scenario, shorter (1 s measured, 0.2 s warm-up): within 60 s on 2 cores")
	fs.DurationVar(&cfg.duration, "duration", 0, "measured time per scenario and contestant (default 5s, 1s with -quick)")
	fs.DurationVar(&cfg.warmup, "warmup", 0, "warm-up before each measurement (default 1s, 200ms with -quick)")
	fs.DurationVar(&cfg.hold, "hold", time.Millisecond, "contended: time each holder keeps the lock (nanosleep(2) on Linux, not time.Sleep, whose end moves with the process's network events)")
	fs.IntVar(&cfg.instances, "instances", 4, "contended: instances (separate pools and client ids)")
	fs.IntVar(&cfg.goroutines, "goroutines", 16, "parallel: goroutines, one key each, on one instance (pool of that size)")
	fs.IntVar(&cfg.cacheKeys, "cache-keys", 100000, "cache: distinct keys obtained")
	only := fs.String("only", "", "comma-separated contestants (default all): "+strings.Join(names(), ","))
	scen := fs.String("scenarios", "", "comma-separated scenarios (default all): "+strings.Join(allScenarios, ","))
	fs.StringVar(&cfg.jsonFile, "json", "", "write the results as a JSON array to `FILE`")
	fs.StringVar(&cfg.plotDir, "plot", "", "write SVG charts to `DIR`")
	fs.StringVar(&cfg.pgDB, "pgdb", "lockreg_bench", "PostgreSQL database of the benchmark, created if missing on the server of LOCKREG_POSTGRES_DSN, so that its statistics count only the benchmark (\"\" = the DSN's own)")
	fs.BoolVar(&cfg.verbose, "v", false, "log every contestant error")
	fs.IntVar(&cfg.ownPostgres, "own-postgres", 0, "start a PostgreSQL of the benchmark's own on this `port` (initdb from /usr/lib/postgresql/*/bin into a temporary directory, shared_preload_libraries=pg_stat_statements), instead of LOCKREG_POSTGRES_DSN's; removed at the end")
	fs.StringVar(&cfg.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to `FILE` (go tool pprof)")
	fs.StringVar(&cfg.traceFile, "trace", "", "write an execution trace of the whole run to `FILE` (go tool trace; its -pprof=net|sync|syscall|sched give where goroutines waited)")
	fs.StringVar(&cfg.syncCommit, "synchronous-commit", "", "synchronous_commit of the benchmark's PostgreSQL database (ALTER DATABASE): on, off, local... (default: the server's)")
	variants := fs.String("variants", "", "aggregator, resequencer: comma-separated variants (default all): "+strings.Join(variantNames(), ","))
	fs.IntVar(&cfg.memWorkers, "memory-workers", 8, "aggregator, resequencer: worker goroutines of the memory variant")
	fs.IntVar(&cfg.pg1Workers, "pg1-workers", 16, "aggregator, resequencer: worker goroutines of the postgres-1 variant")
	fs.IntVar(&cfg.pg4Workers, "pg4-workers", 4, "aggregator, resequencer: worker goroutines per instance of the postgres-4 variant")
	fs.IntVar(&cfg.sqliteWorkers, "sqlite-workers", 4, "aggregator, resequencer: worker goroutines of the sqlite-1 variant")
	fs.StringVar(&cfg.groupLockKind, "group-lock", "store", "aggregator, resequencer: the SQL variants' group lock: store (the group row's, in the store's transactions: Config.Locks nil) or registry (a lease in the lock table: Config.Locks a registry)")
	fs.IntVar(&cfg.lockGroupCommit, "lock-group-commit", 0, "lockreg contestants: jdbc.WithGroupCommit (0: the repository's default, -1: off)")
	fs.IntVar(&cfg.rounds, "rounds", 1, "lock scenarios, aggregator, resequencer, scheduler: run each scenario this many times, every contestant (variant) once per round in turn, the order rotated by one each round (the lock scenarios' and aggregator's and resequencer's; the scheduler's stays), and report each one's median round by ops/s (a failed round, else the round with the most violations, if any has some, is reported instead)")
	fs.IntVar(&cfg.schedBacklog, "scheduler-backlog", 0, "scheduler: due executions pre-inserted and drained by each contestant (default 100000, 5000 with -quick)")
	schedOnly := fs.String("scheduler-only", "", "scheduler: comma-separated contestants (default all): "+strings.Join(schedNames(), ","))
	schedModes := fs.String("scheduler-modes", "", "scheduler: comma-separated modes (default all): "+strings.Join(allModes, ","))
	fs.DurationVar(&cfg.schedPoll, "scheduler-poll", time.Second, "scheduler-latency: polling interval of the contestants that poll (lockreg-scheduler-poll and the db-scheduler replays; db-scheduler's default is 10s)")
	fs.IntVar(&cfg.groupCommit, "group-commit", 0, "aggregator, resequencer: sqlstore.Config.GroupCommit of the SQL variants (0: the store's default, -1: off)")
	fs.IntVar(&cfg.groupPool, "group-pool", 0, "aggregator, resequencer: pool size (MaxOpen = MaxIdle) per PostgreSQL instance (0: its workers)")
	fs.BoolVar(&cfg.groupPartition, "group-partition", false, "aggregator, resequencer: the feed is partitioned by group among the instances (a broker's partitions keyed by correlation ID)")
	fs.IntVar(&cfg.groupWindow, "group-window", 200, "aggregator, resequencer: the feed is shuffled in blocks of this many groups")
	fs.BoolVar(&cfg.groupListen, "group-listen", true, "aggregator, resequencer: lock repositories with jdbc.WithListener(pgxlisten.New(db))")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(errOut, "bench: unexpected arguments %q\n", fs.Args())
		return cfg, errors.New("usage")
	}
	if cfg.groupLockKind != "store" && cfg.groupLockKind != "registry" {
		fmt.Fprintf(errOut, "bench: -group-lock %q: want store or registry\n", cfg.groupLockKind)
		return cfg, errors.New("usage")
	}
	if cfg.duration == 0 {
		cfg.duration = 5 * time.Second
		if cfg.quick {
			cfg.duration = time.Second
		}
	}
	if cfg.schedBacklog == 0 {
		cfg.schedBacklog = 100000
		if cfg.quick {
			cfg.schedBacklog = 5000
		}
	}
	if cfg.warmup == 0 {
		cfg.warmup = time.Second
		if cfg.quick {
			cfg.warmup = 200 * time.Millisecond
		}
	}
	var err error
	if cfg.only, err = list(*only, names()); err != nil {
		fmt.Fprintln(errOut, "bench: -only:", err)
		return cfg, err
	}
	if cfg.scenarios, err = list(*scen, allScenarios); err != nil {
		fmt.Fprintln(errOut, "bench: -scenarios:", err)
		return cfg, err
	}
	if cfg.schedOnly, err = list(*schedOnly, schedNames()); err != nil {
		fmt.Fprintln(errOut, "bench: -scheduler-only:", err)
		return cfg, err
	}
	if cfg.schedModes, err = list(*schedModes, allModes); err != nil {
		fmt.Fprintln(errOut, "bench: -scheduler-modes:", err)
		return cfg, err
	}
	if cfg.variants, err = list(*variants, variantNames()); err != nil {
		fmt.Fprintln(errOut, "bench: -variants:", err)
		return cfg, err
	}
	switch cfg.syncCommit {
	case "", "on", "off", "local", "remote_write", "remote_apply":
	default:
		fmt.Fprintf(errOut, "bench: -synchronous-commit %q: want on, off, local, remote_write or remote_apply\n", cfg.syncCommit)
		return cfg, errors.New("usage")
	}
	if cfg.instances < 2 || cfg.goroutines < 1 || cfg.cacheKeys < 1 || cfg.memWorkers < 1 || cfg.pg1Workers < 1 || cfg.pg4Workers < 1 || cfg.groupPool < 0 || cfg.groupWindow < 1 || cfg.rounds < 1 || cfg.schedBacklog < 1 || cfg.schedPoll <= 0 {
		fmt.Fprintln(errOut, "bench: -instances must be ≥ 2; -goroutines, -cache-keys, -memory-workers, -pg1-workers, -pg4-workers, -group-window, -rounds and -scheduler-backlog ≥ 1, -group-pool ≥ 0, -scheduler-poll > 0")
		return cfg, errors.New("usage")
	}
	return cfg, nil
}

func names() []string {
	var n []string
	for _, c := range contestants {
		n = append(n, c.name)
	}
	return n
}

func list(s string, valid []string) ([]string, error) {
	if s == "" {
		return valid, nil
	}
	var out []string
	for _, v := range strings.Split(s, ",") {
		v = strings.TrimSpace(v)
		if !slices.Contains(valid, v) {
			return nil, fmt.Errorf("unknown %q (valid: %s)", v, strings.Join(valid, ","))
		}
		out = append(out, v)
	}
	return out, nil
}

// run runs the selected scenarios and writes the report to out.
func run(ctx context.Context, cfg config, out io.Writer) error {
	began := time.Now()
	e := openEnv(ctx, cfg)
	defer e.close()
	defer closeEtcd(e) // etcd.go: the clusters started on first use
	want := func(s string) bool { return slices.Contains(cfg.scenarios, s) }

	var results []result
	add := func(r result) {
		results = append(results, r)
		fmt.Fprintf(os.Stderr, "bench: %-11s %-19s %s\n", r.Scenario, r.Contestant, brief(r))
	}
	// keep collects the rounds of each scenario and contestant (or variant);
	// flush reports each one's pick (pickRound).
	var (
		order  []string
		rounds = map[string][]result{} // by scenario and contestant
	)
	keep := func(r result) {
		k := r.Scenario + "\x00" + r.Contestant
		if rounds[k] == nil {
			order = append(order, k)
		}
		rounds[k] = append(rounds[k], r)
		if cfg.rounds > 1 {
			fmt.Fprintf(os.Stderr, "bench: round %d/%d %-11s %-19s %s\n", len(rounds[k]), cfg.rounds, r.Scenario, r.Contestant, brief(r))
		}
	}
	flush := func() {
		picked := make([]result, len(order))
		for i, k := range order {
			picked[i] = pickRound(rounds[k])
		}
		applyFloors(picked, func(s, c string) []result { return rounds[s+"\x00"+c] }) // floorratio.go
		for _, r := range picked {
			add(r)
		}
		order, rounds = nil, map[string][]result{}
	}
	for _, s := range []string{"uncontended", "parallel", "contended", "cache"} {
		if !want(s) && !(s == "contended" && want("safety")) {
			continue
		}
		for round := range cfg.rounds {
			lockRound(ctx, e, cfg, s, round, want, keep)
		}
		flush()
	}

	for _, s := range groupScenarios {
		if !want(s) {
			continue
		}
		var runs []func() (result, error) // the variants, then their floors
		for _, v := range groupVariants {
			if slices.Contains(cfg.variants, v.name) {
				runs = append(runs, func() (result, error) { return groupRun(ctx, e, s, v, cfg) })
			}
		}
		for _, f := range groupFloorsFor(cfg) { // floors.go
			runs = append(runs, func() (result, error) { return floorGroupRun(ctx, e, s, f, cfg) })
		}
		for round := range cfg.rounds {
			for _, run := range rotate(runs, round) { // rounds.go
				r, err := run()
				if err != nil {
					r.Skipped = "failed: " + err.Error()
				}
				keep(r)
			}
		}
		flush()
	}

	if want(schedulerScenario) {
		for range cfg.rounds {
			schedulerRound(ctx, e, cfg, keep) // scheduler.go
		}
		flush()
	}

	if want(perKeyScenario) {
		perKeyRuns(ctx, e, cfg, add) // perkey.go
	}
	if want(otelScenario) && slices.Contains(cfg.only, "lockreg-pgx") {
		otelRuns(ctx, e, cfg, add) // otel.go
	}

	writeMarkdown(out, cfg, append(e.facts(ctx), etcdFacts(e)...), results, time.Since(began))
	if cfg.jsonFile != "" {
		b, err := json.MarshalIndent(results, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(cfg.jsonFile, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	if cfg.plotDir != "" {
		if err := writePlots(cfg.plotDir, results); err != nil {
			return err
		}
	}
	return nil
}

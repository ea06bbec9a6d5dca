package main

import (
	"fmt"
	"html"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"
)

func f(p *float64, prec int) string {
	if p == nil {
		return "–"
	}
	return fmt.Sprintf("%.*f", prec, *p)
}

func i64(p *int64) string {
	if p == nil {
		return "–"
	}
	return fmt.Sprint(*p)
}

// brief is the progress line of a result.
func brief(r result) string {
	switch {
	case r.Skipped != "":
		return "skipped: " + r.Skipped
	case r.Scenario == "safety":
		return "violations " + i64(r.Violations)
	case r.Scenario == "cache":
		return f(r.NsPerOp, 0) + " ns/op, " + f(r.BytesPerOp, 0) + " B/lock"
	case r.Scenario == "contended":
		return f(r.OpsPerSec, 0) + " acq/s, hand-off p50 " + f(r.HandP50ms, 2) + " ms, fairness " + f(r.Fairness, 2)
	case isSchedScenario(r.Scenario):
		return schedulerBrief(r)
	case r.Scenario == perKeyScenario:
		return perKeyBrief(r)
	case r.Scenario == "aggregator" || r.Scenario == "resequencer":
		return f(r.MsgsPerSec, 0) + " msgs/s, Handle p50 " + f(r.HandleP50us, 0) + " µs, p99 " + f(r.HandleP99us, 0) +
			" µs, stmts/msg " + f(r.StmtsPerOp, 2) + ", commits/msg " + f(r.CommitsPerOp, 2) +
			", server tx/msg " + f(r.ServerPerOp, 2) + ", retries " + i64(r.HandleRetries) + ", violations " + i64(r.Violations)
	}
	return f(r.OpsPerSec, 0) + " ops/s"
}

func writeMarkdown(w io.Writer, cfg config, facts [][2]string, rs []result, took time.Duration) {
	fmt.Fprintf(w, "## Machine\n\n| | |\n|---|---|\n")
	for _, kv := range facts {
		fmt.Fprintf(w, "| %s | %s |\n", kv[0], strings.ReplaceAll(kv[1], "|", "\\|"))
	}
	mode := "default"
	if cfg.quick {
		mode = "-quick"
	}
	if cfg.rounds > 1 {
		mode += fmt.Sprintf(", %d interleaved rounds of the lock, aggregator, resequencer and scheduler scenarios (the order rotated each round but the scheduler's; each contestant's or variant's median round; safety: its worst)", cfg.rounds)
	}
	fmt.Fprintf(w, "| Run | %s: %v warm-up + %v measured per scenario and contestant; pools MaxOpen = MaxIdle = 4 per instance (%d in parallel); contended: %d instances, hold %v; "+
		"aggregator, resequencer: workers memory %d, postgres-1 %d, postgres-4 %d per instance, pool %s per instance, listener %v, shuffle blocks of %d groups%s; whole run %v |\n\n",
		mode, cfg.warmup, cfg.duration, cfg.goroutines, cfg.instances, cfg.hold,
		cfg.memWorkers, cfg.pg1Workers, cfg.pg4Workers, poolDesc(cfg.groupPool), cfg.groupListen, cfg.groupWindow, partitionDesc(cfg.groupPartition), took.Round(time.Second))

	section := func(s, title, header string, row func(r result) string) {
		var rows []string
		for _, r := range rs {
			if r.Scenario != s {
				continue
			}
			if r.Skipped != "" {
				rows = append(rows, fmt.Sprintf("| %s | skipped: %s |", r.Contestant, strings.ReplaceAll(r.Skipped, "|", "\\|")))
				continue
			}
			rows = append(rows, "| "+r.Contestant+" | "+row(r)+" |")
		}
		if len(rows) == 0 {
			return
		}
		cols := strings.Count(header, "|") - 1
		fmt.Fprintf(w, "## %s\n\n%s\n|---|%s\n", title, header, strings.Repeat("---:|", cols-1))
		for _, r := range rows {
			fmt.Fprintln(w, r)
		}
		fmt.Fprintln(w)
	}
	section("uncontended", "uncontended: 1 goroutine, 1 key",
		"| contestant | cycles/s | × floor | acquire p50 / p99 µs | release p50 / p99 µs | lock / unlock mean µs | server exec µs/stmt | client µs/op beyond exec | stmts/cycle (client) | server/cycle | 40001 retries |",
		func(r result) string {
			return strings.Join([]string{f(r.OpsPerSec, 0), ratio(r), f(r.AcqP50us, 0) + " / " + f(r.AcqP99us, 0),
				f(r.RelP50us, 0) + " / " + f(r.RelP99us, 0), f(r.AcqMeanus, 0) + " / " + f(r.RelMeanus, 0),
				f(r.ServerUsPerStmt, 1), beyond(r), f(r.StmtsPerOp, 2), f(r.ServerPerOp, 2), i64(r.Retries)}, " | ")
		})
	otelSection(section, cfg)
	section("parallel", fmt.Sprintf("parallel: %d goroutines, distinct keys, one instance", cfg.goroutines),
		"| contestant | cycles/s | × floor | wall µs/op | server exec µs/stmt | stmts/cycle (client) | server/cycle | 40001 retries | errors |",
		func(r result) string {
			return strings.Join([]string{f(r.OpsPerSec, 0), ratio(r), f(r.ClientUsPerOp, 0), f(r.ServerUsPerStmt, 1), f(r.StmtsPerOp, 2), f(r.ServerPerOp, 2), i64(r.Retries), i64(r.Errors)}, " | ")
		})
	section("contended", fmt.Sprintf("contended: %d instances, 1 key, hold %v", cfg.instances, cfg.hold),
		"| contestant | acq/s | × floor | hold mean ms | cross-instance hand-offs | hand-off p50 / p90 / p99 / max ms | acquisitions per instance | fairness | wait p99 / max ms | stmts/s (client) | stmts/acq | server/acq | errors |",
		func(r result) string {
			per := make([]string, len(r.PerInst))
			for i, n := range r.PerInst {
				per[i] = fmt.Sprint(n)
			}
			hand := i64(r.Handoffs)
			if r.Early != nil && *r.Early > 0 {
				hand += fmt.Sprintf(" (%d early)", *r.Early)
			}
			return strings.Join([]string{f(r.OpsPerSec, 0), ratio(r), f(r.HoldMeanms, 3), hand,
				f(r.HandP50ms, 2) + " / " + f(r.HandP90ms, 2) + " / " + f(r.HandP99ms, 2) + " / " + f(r.HandMaxms, 1),
				strings.Join(per, " · "), f(r.Fairness, 2), f(r.WaitP99ms, 1) + " / " + f(r.WaitMaxms, 0),
				f(r.StmtsPerS, 0), f(r.StmtsPerOp, 2), f(r.ServerPerOp, 2), i64(r.Errors)}, " | ")
		})
	section("safety", "safety: mutual exclusion during contended (in-process holder counter, warm-up included)",
		"| contestant | acq/s | violations |",
		func(r result) string { return f(r.OpsPerSec, 0) + " | " + i64(r.Violations) })
	section("cache", fmt.Sprintf("cache: Obtain on %d distinct keys", cfg.cacheKeys),
		"| contestant | ns/op | bytes per cached idle lock |",
		func(r result) string { return f(r.NsPerOp, 0) + " | " + f(r.BytesPerOp, 0) })
	groupRow := func(r result) string {
		shape := i64(r.Instances) + " × " + i64(r.Workers)
		if r.Pool != nil {
			shape += ", pool " + i64(r.Pool)
		}
		if r.Listen != nil && *r.Listen {
			shape += ", listen"
		}
		if r.GroupLock != "" {
			shape += ", " + r.GroupLock + " lock"
		}
		rate := f(r.MsgsPerSec, 0)
		if r.FeedRanOut {
			rate += " (feed ran out)"
		}
		return strings.Join([]string{shape, rate, ratio(r), f(r.FloorInsertRatio, 2), f(r.HandleP50us, 0) + " / " + f(r.HandleP99us, 0),
			i64(r.Outputs) + " / " + i64(r.ExpectedOutputs), i64(r.GroupsCompleted), i64(r.HandleRetries), i64(r.Errors),
			f(r.StmtsPerOp, 2), f(r.CommitsPerOp, 2), f(r.ServerPerOp, 2), i64(r.Violations)}, " | ")
	}
	groupHeader := "| variant | instances × workers | msgs/s | × floor-add | × floor-insert | Handle p50 / p99 µs | outputs / expected | groups completed | retries | errors | stmts/msg (client) | commits/msg (client) | server tx/msg | violations |"
	section("aggregator", fmt.Sprintf("aggregator: groups of %d messages shuffled in blocks of %d groups, Handle called directly", groupSize, cfg.groupWindow),
		groupHeader, groupRow)
	section("resequencer", fmt.Sprintf("resequencer: groups of %d messages shuffled in blocks of %d groups, Handle called directly (ReleasePartialSequences %v)", groupSize, cfg.groupWindow, reseqPartial),
		groupHeader, groupRow)
	perKeySection(section)
	schedulerSection(section, cfg, rs)
	statementSection(w, rs)
	fmt.Fprintln(w, "× floor: ops/s ÷ the durable floor's on the same server in the same run (floor-durable: a cycle as two single-row UPDATE transactions on a dedicated connection; floor-handoff: the release is one UPDATE of the next holder with NOTIFY, the next instance's listener wakes it and it reads the row; floor-add: one transaction of a message INSERT and its group's UPDATE; floor-insert: the INSERT alone; both from as many workers as postgres-4 has in all, sqlite-1's on SQLite).")
	fmt.Fprintln(w, "hold mean: time from a lock call returning to its holder's unlock call, -hold held by nanosleep(2) on Linux (Go's timers wait in whole milliseconds; see bench/hold_linux.go).")
	fmt.Fprintln(w, "hand-off: time from the holder calling unlock to the next lock call of a different instance returning; \"early\" hand-offs returned before that unlock call did.")
	fmt.Fprintln(w, "server exec µs/stmt: mean execution time of the benchmark database's statements (pg_stat_statements, -own-postgres), warm-up included; client µs/op beyond exec: the mean lock or unlock call less the server's execution time of the statements it sent (stmts/cycle ÷ 2 of them): driver, network, scheduling and commit.")
	fmt.Fprintln(w, "stmts (client): statements sent, counted by a pgx tracer (BEGIN/COMMIT included); – where the driver is not traced.")
	fmt.Fprintln(w, "server: PostgreSQL transactions (pg_stat_database xact_commit+xact_rollback of the benchmark database) or MariaDB Com_* statements, per operation over the instances' whole life, warm-up included.")
	fmt.Fprintln(w, "aggregator, resequencer: outputs are aggregated messages (one per completed group) or resequenced messages; expected = one per completed group, or the messages of completed groups; retries = Handle calls that returned an error (requeued), from the measured window on; errors = errors the handlers and registries logged; violations = missing, extra, duplicate or out-of-order outputs, discards and messages never handled.")
}

// ratio is r's ratio to its floor, "0.93× floor-durable", or "–".
func ratio(r result) string {
	if r.FloorRatio == nil {
		return "–"
	}
	return f(r.FloorRatio, 2) + "× " + r.Floor
}

func poolDesc(n int) string {
	if n == 0 {
		return "= workers"
	}
	return fmt.Sprint(n)
}

// ---- SVG ----

var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"}

func colorOf(name string) string {
	for i, n := range append(names(), variantNames()...) {
		if n == name {
			return palette[i%len(palette)]
		}
	}
	return "#333"
}

func writePlots(dir string, rs []result) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, s := range []struct{ scenario, title, unit string }{
		{"uncontended", "uncontended: acquire+release cycles/s (1 goroutine, 1 key)", "cycles/s"},
		{"parallel", "parallel: total cycles/s (16 goroutines, distinct keys)", "cycles/s"},
		{"contended", "contended: acquisitions/s (4 instances, 1 key, hold 1 ms)", "acq/s"},
		{"aggregator", "aggregator: messages/s through Handle (groups of 10)", "msgs/s"},
		{"resequencer", "resequencer: messages/s through Handle (groups of 10)", "msgs/s"},
	} {
		var bars []result
		for _, r := range rs {
			if r.Scenario == s.scenario && r.Skipped == "" && r.OpsPerSec != nil {
				bars = append(bars, r)
			}
		}
		if len(bars) == 0 {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, "throughput-"+s.scenario+".svg"), barChart(s.title, s.unit, bars), 0o644); err != nil {
			return err
		}
	}
	var cont []result
	for _, r := range rs {
		if r.Scenario == "contended" && r.Skipped == "" {
			cont = append(cont, r)
		}
	}
	if len(cont) > 0 {
		return os.WriteFile(filepath.Join(dir, "handoff-cdf.svg"), handoffCDF(cont), 0o644)
	}
	return nil
}

func barChart(title, unit string, rs []result) []byte {
	const left, width, barH, gap, top = 150, 420, 18, 6, 34
	h := top + len(rs)*(barH+gap) + 24
	var hi float64
	for _, r := range rs {
		hi = max(hi, *r.OpsPerSec)
	}
	if hi == 0 {
		hi = 1
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", left+width+90, h)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/><text x="8" y="20" font-size="14" font-weight="bold">%s</text>`+"\n", html.EscapeString(title))
	for i, r := range rs {
		y := top + i*(barH+gap)
		w := *r.OpsPerSec / hi * width
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end">%s</text>`, left-6, y+barH-4, html.EscapeString(r.Contestant))
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>`, left, y, w, barH, colorOf(r.Contestant))
		fmt.Fprintf(&b, `<text x="%.1f" y="%d">%.0f</text>`+"\n", float64(left)+w+4, y+barH-4, *r.OpsPerSec)
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#555">%s (longer is better)</text>`+"\n", left, h-6, unit)
	b.WriteString("</svg>\n")
	return []byte(b.String())
}

// handoffCDF plots, per contestant, the cumulative distribution of the
// cross-instance hand-off latency on a logarithmic time axis.
func handoffCDF(rs []result) []byte {
	const left, top, pw, ph = 60, 34, 520, 260
	lo, hi := -2.0, 0.0 // log10 ms: 0.01 ms ..
	for _, r := range rs {
		if len(r.handoffs) > 0 {
			m := float64(r.handoffs[len(r.handoffs)-1]) / float64(time.Millisecond)
			hi = max(hi, math.Ceil(math.Log10(max(m, 0.01))))
		}
	}
	hi = max(hi, 1)
	x := func(msv float64) float64 {
		l := math.Log10(max(msv, math.Pow(10, lo)))
		return left + (l-lo)/(hi-lo)*pw
	}
	y := func(frac float64) float64 { return top + ph - frac*ph }
	legendH := 18 * len(rs)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", left+pw+20, top+ph+50+legendH)
	b.WriteString(`<rect width="100%" height="100%" fill="white"/><text x="8" y="20" font-size="14" font-weight="bold">contended: cross-instance hand-off latency, cumulative distribution</text>` + "\n")
	for d := lo; d <= hi; d++ {
		xv := x(math.Pow(10, d))
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/><text x="%.1f" y="%d" text-anchor="middle">%g ms</text>`+"\n",
			xv, top, xv, top+ph, xv, top+ph+16, math.Pow(10, d))
	}
	for _, p := range []float64{0, 0.5, 0.9, 0.99, 1} {
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#eee"/><text x="%d" y="%.1f" text-anchor="end">p%g</text>`+"\n",
			left, y(p), left+pw, y(p), left-4, y(p)+4, p*100)
	}
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#888"/>`+"\n", left, top, pw, ph)
	for i, r := range rs {
		n := len(r.handoffs)
		ly := top + ph + 40 + 18*i
		label := fmt.Sprintf("%s: %d hand-offs", r.Contestant, n)
		if n > 0 {
			label += fmt.Sprintf(", p50 %.2f ms, p99 %.2f ms", *r.HandP50ms, *r.HandP99ms)
		}
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="3"/><text x="%d" y="%d">%s</text>`+"\n",
			left, ly-4, left+24, ly-4, colorOf(r.Contestant), left+30, ly, html.EscapeString(label))
		if n == 0 {
			continue
		}
		var pts []string
		step := max(1, n/300)
		for k := 0; k < n; k += step {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(float64(r.handoffs[k])/float64(time.Millisecond)), y(float64(k+1)/float64(n))))
		}
		pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(float64(r.handoffs[n-1])/float64(time.Millisecond)), y(1)))
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", colorOf(r.Contestant), strings.Join(pts, " "))
	}
	b.WriteString("</svg>\n")
	return []byte(b.String())
}

// beyond is the client's share of an uncontended lock or unlock call: its
// mean wall time less the server's execution of its statements.
func beyond(r result) string {
	if r.ClientUsPerOp == nil || r.ServerUsPerStmt == nil || r.StmtsPerOp == nil {
		return "–"
	}
	return fmt.Sprintf("%.0f", *r.ClientUsPerOp-*r.ServerUsPerStmt**r.StmtsPerOp/2)
}

// statementSection lists the server's statements per scenario and
// contestant: calls and mean execution time (pg_stat_statements).
func statementSection(w io.Writer, rs []result) {
	var rows []string
	for _, r := range rs {
		if len(r.ServerStmts) == 0 || (r.Scenario != "uncontended" && r.Scenario != "parallel" && r.Scenario != "contended") {
			continue
		}
		var total int64
		for _, s := range r.ServerStmts {
			total += s.Calls
		}
		for _, s := range r.ServerStmts {
			if s.Calls*100 < total { // under 1 % of the calls: set-up, close
				continue
			}
			q := strings.Join(strings.Fields(s.Query), " ")
			if len(q) > 90 {
				q = q[:90] + "…"
			}
			rows = append(rows, fmt.Sprintf("| %s | %s | %d | %.1f | %d | %.1f | `%s` |", r.Scenario, r.Contestant, s.Calls, s.MeanUs, s.Plans, s.PlanUs,
				strings.ReplaceAll(q, "|", "\\|")))
		}
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(w, "## server time per statement (pg_stat_statements; statements with at least 1 %% of the calls)\n\n"+
		"| scenario | contestant | calls | mean exec µs | plans | mean plan µs | statement |\n|---|---|---:|---:|---:|---:|---|\n")
	for _, r := range rows {
		fmt.Fprintln(w, r)
	}
	fmt.Fprintln(w)
}

// partitionDesc describes -group-partition for the run's line.
func partitionDesc(on bool) string {
	if on {
		return ", feed partitioned by group among the instances"
	}
	return ""
}

package main

// The scheduler scenarios' progress lines and report tables.

import (
	"fmt"
	"strings"
)

// isSchedScenario tells the scheduler scenarios' results.
func isSchedScenario(s string) bool {
	return s == schedulerScenario || s == schedContScenario || s == schedLatScenario
}

// schedulerBrief is the progress line of a scheduler result.
func schedulerBrief(r result) string {
	s := f(r.OpsPerSec, 0) + " executions/s, " + i64(r.Executions) + " of " + i64(r.Backlog) +
		", stmts/exec " + f(r.StmtsPerOp, 2) + ", commits/exec " + f(r.CommitsPerOp, 2) +
		", errors " + i64(r.Errors) + ", violations " + i64(r.Violations)
	if r.Scenario == schedLatScenario {
		s = "start p50 " + f(r.StartP50ms, 1) + " ms, p99 " + f(r.StartP99ms, 1) + " ms, " + s
	}
	return s
}

// schedRatios returns, per scenario and contestant, the executions/s.
func schedRatios(rs []result) map[string]float64 {
	rate := map[string]float64{}
	for _, r := range rs {
		if isSchedScenario(r.Scenario) && r.Skipped == "" && r.OpsPerSec != nil {
			rate[r.Scenario+"\x00"+r.Contestant] = *r.OpsPerSec
		}
	}
	return rate
}

// schedulerSection writes the three scheduler tables, with each
// contestant's rate relative to river's and dbscheduler-fetch's in the
// same scenario.
func schedulerSection(section func(s, title, header string, row func(r result) string), cfg config, rs []result) {
	rate := schedRatios(rs)
	ratio := func(r result, to string) string {
		base := rate[r.Scenario+"\x00"+to]
		if base == 0 || r.OpsPerSec == nil {
			return "–"
		}
		return fmt.Sprintf("%.2f×", *r.OpsPerSec/base)
	}
	shape := fmt.Sprintf("%d instances × %d threads (own pools of %d)", schedInstances, schedThreads, schedPool)
	section(schedulerScenario, fmt.Sprintf("scheduler: drain of %d due no-op executions, %s", cfg.schedBacklog, shape),
		"| contestant | executions / backlog | executions/s | stmts/exec (client) | commits/exec (client) | vs river | vs dbscheduler-fetch | errors | violations | wake-up |",
		func(r result) string {
			return strings.Join([]string{i64(r.Executions) + " / " + i64(r.Backlog), f(r.OpsPerSec, 0), f(r.StmtsPerOp, 2),
				f(r.CommitsPerOp, 2), ratio(r, "river"), ratio(r, "dbscheduler-fetch"), i64(r.Errors), i64(r.Violations), r.Wake}, " | ")
		})
	section(schedContScenario, fmt.Sprintf("scheduler-continuous: producers keep up to %d executions due now queued, %v warm-up + %v measured, %s",
		min(schedQueued, cfg.schedBacklog), cfg.warmup, cfg.duration, shape),
		"| contestant | executions/s (steady state) | run / scheduled | queued at end | stmts/exec (client) | commits/exec (client) | vs river | vs dbscheduler-fetch | errors | violations | wake-up |",
		func(r result) string {
			return strings.Join([]string{f(r.OpsPerSec, 0), i64(r.Executions) + " / " + i64(r.Backlog), i64(r.Queued), f(r.StmtsPerOp, 2),
				f(r.CommitsPerOp, 2), ratio(r, "river"), ratio(r, "dbscheduler-fetch"), i64(r.Errors), i64(r.Violations), r.Wake}, " | ")
		})
	section(schedLatScenario, fmt.Sprintf("scheduler-latency: %d executions/s due now, one per statement, commit of the schedule to start of the handler, %v warm-up + %v measured, %s",
		schedRate, cfg.warmup, cfg.duration, shape),
		"| contestant | start p50 ms | start p99 ms | samples (early) | executions/s | stmts/exec (client) | commits/exec (client) | errors | violations | wake-up |",
		func(r result) string {
			return strings.Join([]string{f(r.StartP50ms, 1), f(r.StartP99ms, 1), i64(r.Samples) + " (" + i64(r.StartEarly) + ")", f(r.OpsPerSec, 1),
				f(r.StmtsPerOp, 2), f(r.CommitsPerOp, 2), i64(r.Errors), i64(r.Violations), r.Wake}, " | ")
		})
}

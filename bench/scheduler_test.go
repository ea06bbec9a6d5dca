package main

import (
	"os"
	"slices"
	"testing"
)

// TestSchedulerDrain runs every scheduler contestant in each of its modes
// (drain, continuous, latency) briefly, on a small backlog, and checks
// that each ran every execution it scheduled, none twice, without errors,
// with consistent counts. It asserts no timing. The MariaDB contestants
// may be skipped where MariaDB is unreachable, but not in CI.
func TestSchedulerDrain(t *testing.T) {
	skipWithoutPostgres(t)
	const backlog = 300
	recs := runJSON(t, "-scenarios", schedulerScenario, "-scheduler-backlog", "300",
		"-duration", "500ms", "-warmup", "100ms", "-scheduler-poll", "50ms")
	noMariaDB := mariadbReachable() != "" && os.Getenv("CI") != "true"
	for _, mode := range allModes {
		for _, c := range schedContestants {
			if !slices.Contains(c.modes, mode) {
				continue
			}
			r := findRecord(recs, scenarioOf(mode), c.name)
			switch {
			case r == nil:
				t.Errorf("%s/%s: no record", mode, c.name)
			case r["skipped"] != nil && c.server == "mariadb" && noMariaDB:
				t.Logf("%s/%s skipped: %v", mode, c.name, r["skipped"])
			case r["skipped"] != nil:
				t.Errorf("%s/%s skipped: %v", mode, c.name, r["skipped"])
			default:
				checkSchedRecord(t, mode+"/"+c.name, mode, r, backlog)
			}
		}
	}
}

// findRecord is the record of scenario and contestant, or nil.
func findRecord(recs []map[string]any, scenario, contestant string) map[string]any {
	for _, rec := range recs {
		if rec["scenario"] == scenario && rec["contestant"] == contestant {
			return rec
		}
	}
	return nil
}

// checkSchedRecord checks one scheduler record's counts.
func checkSchedRecord(t *testing.T, name, mode string, r map[string]any, backlog float64) {
	t.Helper()
	num := func(k string) float64 {
		v, ok := r[k].(float64)
		if !ok {
			t.Errorf("%s: %s = %v, want a number", name, k, r[k])
		}
		return v
	}
	runs, scheduled := num("executions"), num("backlog")
	if mode == modeDrain && scheduled != backlog {
		t.Errorf("%s: backlog = %v, want %v", name, scheduled, backlog)
	}
	if scheduled < 1 || runs != scheduled {
		t.Errorf("%s: %v executions ran of %v scheduled", name, runs, scheduled)
	}
	for _, k := range []string{"errors", "violations"} {
		if v := num(k); v != 0 {
			t.Errorf("%s: %s = %v, want 0", name, k, v)
		}
	}
	for _, k := range []string{"ops_per_sec", "stmts_per_op", "commits_per_op"} {
		if v := num(k); v <= 0 {
			t.Errorf("%s: %s = %v, want > 0", name, k, v)
		}
	}
	if r["wake"] == nil {
		t.Errorf("%s: no wake-up described", name)
	}
	if mode == modeLatency {
		samples := num("samples")
		if samples < 1 || samples > scheduled {
			t.Errorf("%s: %v samples of %v scheduled", name, samples, scheduled)
		}
		if p50, p99 := num("start_p50_ms"), num("start_p99_ms"); p50 < 0 || p99 < p50 {
			t.Errorf("%s: start p50 %v ms, p99 %v ms", name, p50, p99)
		}
	}
}

package main

import "testing"

// TestSchedulerDrain drains a small backlog with every scheduler
// contestant on PostgreSQL and checks that each ran every execution,
// without errors. It asserts no timing.
func TestSchedulerDrain(t *testing.T) {
	skipWithoutPostgres(t)
	const backlog = 500
	recs := runJSON(t, "-scenarios", schedulerScenario, "-scheduler-backlog", "500")
	for _, c := range schedulerContestants {
		var r map[string]any
		for _, rec := range recs {
			if rec["scenario"] == schedulerScenario && rec["contestant"] == c {
				r = rec
			}
		}
		switch {
		case r == nil:
			t.Errorf("no record for %s", c)
		case r["skipped"] != nil:
			t.Errorf("%s skipped: %v", c, r["skipped"])
		default:
			if v, ok := r["executions"].(float64); !ok || v != backlog {
				t.Errorf("%s: executions = %v, want %d", c, r["executions"], backlog)
			}
			if v, ok := r["errors"].(float64); !ok || v != 0 {
				t.Errorf("%s: errors = %v, want a written 0", c, r["errors"])
			}
			if v, ok := r["ops_per_sec"].(float64); !ok || v <= 0 {
				t.Errorf("%s: ops_per_sec = %v", c, r["ops_per_sec"])
			}
		}
	}
}

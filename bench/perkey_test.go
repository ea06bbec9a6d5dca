package main

import (
	"os"
	"testing"
)

// TestQuickPerKey runs the perkey scenario briefly, in memory and, when
// PostgreSQL is reachable, with 4 instances on it. A violation (two
// handlers of a key at once behind the middleware, a lost counter update)
// fails it, and so does a lock cycle that costs other than two statements
// per message beside the handler's one (give or take the calls in flight
// at the edges of the 1 s window).
func TestQuickPerKey(t *testing.T) {
	variants := "memory"
	if msg := postgresReachable(); msg == "" {
		variants += ",postgres-4"
	} else if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	} else {
		t.Log("postgres-4 left out: " + msg)
	}
	recs := runJSON(t, "-duration", "1s", "-warmup", "100ms", "-scenarios", perKeyScenario, "-variants", variants)
	for _, r := range recs {
		name := r["contestant"]
		if r["skipped"] != nil {
			t.Errorf("%v skipped: %v", name, r["skipped"])
			continue
		}
		if v, ok := r["violations"].(float64); !ok || v != 0 {
			t.Errorf("%v: violations = %v, want a written 0", name, r["violations"])
		}
		if v, ok := r["msgs_per_sec"].(float64); !ok || v <= 0 {
			t.Errorf("%v: msgs_per_sec = %v", name, r["msgs_per_sec"])
		}
		want := map[any]float64{"postgres-4-plain": 1, "postgres-4-lockmw-distinct": 3}[name]
		rate, _ := r["msgs_per_sec"].(float64)
		switch v, ok := r["stmts_per_op"].(float64); {
		case want == 0:
		case rate < 200:
			// The calls in flight at the window's edges (16, of up to
			// 3 statements) could move the figure by more than 0.5.
			t.Logf("%v: %.0f messages in the window, too few to check stmts_per_op = %v", name, rate, r["stmts_per_op"])
		case !ok || v < want-0.5 || v > want+0.5:
			t.Errorf("%v: stmts_per_op = %v, want %v", name, r["stmts_per_op"], want)
		}
	}
	if want := 3; variants != "memory" {
		want = 6
		if len(recs) != want {
			t.Errorf("%d records, want %d", len(recs), want)
		}
	}
}

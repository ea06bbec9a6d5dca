package main

import (
	"strings"
	"testing"
)

// TestQuickEtcd runs the etcd contestants briefly on the clusters the
// benchmark starts in-process (three members and one), and checks that
// each acquired, that the contended scenario gives a fairness figure and
// that no two holders overlapped. It needs no server and asserts no
// timing.
func TestQuickEtcd(t *testing.T) {
	names := []string{"lockreg-etcd", "etcd-mutex", "lockreg-etcd-1", "etcd-mutex-1"}
	scenarios := []string{"uncontended", "parallel", "contended", "safety"}
	recs := runJSON(t, "-duration", "300ms", "-warmup", "100ms", "-goroutines", "4", "-only", strings.Join(names, ","),
		"-scenarios", strings.Join(scenarios, ","))
	checkRecords(t, recs, names, scenarios)
	for _, name := range names {
		r := findRecord(recs, "contended", name)
		if r == nil || r["skipped"] != nil {
			continue // reported by checkRecords
		}
		per, _ := r["acquisitions_per_instance"].([]any)
		var n float64
		for _, v := range per {
			n += v.(float64)
		}
		if n <= 0 {
			t.Errorf("contended/%s: no acquisitions in the window: %v", name, per)
		}
		if v, ok := r["stmts_per_op"].(float64); !ok || v < 1 {
			t.Errorf("contended/%s: etcd requests per acquisition %v", name, r["stmts_per_op"])
		}
	}
	if len(etcdEnvs) != 0 {
		t.Errorf("%d runs left their etcd clusters running", len(etcdEnvs))
	}
}

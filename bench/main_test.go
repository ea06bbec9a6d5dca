package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// runJSON runs the benchmark with args and returns its JSON records.
func runJSON(t *testing.T, args ...string) []map[string]any {
	t.Helper()
	dir := t.TempDir()
	file := filepath.Join(dir, "bench.json")
	cfg, err := parseFlags(append(args, "-json", file, "-plot", dir), io.Discard)
	if err != nil {
		t.Fatalf("parseFlags: %v", err)
	}
	var out strings.Builder
	if err := run(context.Background(), cfg, &out); err != nil {
		t.Fatalf("run: %v", err)
	}
	if !strings.Contains(out.String(), "## Machine") {
		t.Errorf("no machine facts in the report:\n%s", out.String())
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var recs []map[string]any
	if err := json.Unmarshal(b, &recs); err != nil {
		t.Fatalf("invalid JSON: %v\n%s", err, b)
	}
	return recs
}

// checkRecords checks that every contestant has a record per scenario with
// the fields that scenario promises.
func checkRecords(t *testing.T, recs []map[string]any, contestants, scenarios []string) {
	t.Helper()
	for _, c := range contestants {
		for _, s := range scenarios {
			i := slices.IndexFunc(recs, func(r map[string]any) bool { return r["contestant"] == c && r["scenario"] == s })
			if i < 0 {
				t.Errorf("no record for %s/%s", s, c)
				continue
			}
			r := recs[i]
			if r["skipped"] != nil {
				t.Errorf("%s/%s skipped: %v", s, c, r["skipped"])
				continue
			}
			if v, ok := r["ops_per_sec"].(float64); !ok || v <= 0 {
				t.Errorf("%s/%s: ops_per_sec = %v", s, c, r["ops_per_sec"])
			}
			switch s {
			case "uncontended":
				for _, k := range []string{"acquire_p50_us", "acquire_p99_us"} {
					if _, ok := r[k].(float64); !ok {
						t.Errorf("%s/%s: no %s", s, c, k)
					}
				}
			case "contended":
				if _, ok := r["fairness"].(float64); !ok {
					t.Errorf("%s/%s: no fairness", s, c)
				}
			case "safety":
				if v, ok := r["violations"].(float64); !ok || v != 0 {
					t.Errorf("%s/%s: violations = %v, want a written 0", s, c, r["violations"])
				}
			case "cache":
				if v, ok := r["bytes_per_lock"].(float64); !ok || v <= 0 {
					t.Errorf("%s/%s: bytes_per_lock = %v", s, c, r["bytes_per_lock"])
				}
			}
		}
	}
}

// TestQuickSQLite needs no server.
func TestQuickSQLite(t *testing.T) {
	recs := runJSON(t, "-quick", "-duration", "300ms", "-warmup", "50ms", "-cache-keys", "2000", "-only", "lockreg-sqlite")
	checkRecords(t, recs, []string{"lockreg-sqlite"}, allScenarios)
}

// TestQuickPostgres runs one lockreg and one peer contestant on PostgreSQL.
func TestQuickPostgres(t *testing.T) {
	dsn := envOr("LOCKREG_POSTGRES_DSN", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	db, err := sql.Open("pgx", dsn)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		err = db.PingContext(ctx)
		cancel()
		db.Close()
	}
	if err != nil {
		msg := "PostgreSQL unreachable at " + dsn + " (set LOCKREG_POSTGRES_DSN): " + err.Error()
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg) // the server is unreachable
	}
	recs := runJSON(t, "-quick", "-duration", "300ms", "-warmup", "50ms", "-cache-keys", "2000",
		"-only", "lockreg-pgx,shedlock", "-scenarios", "uncontended,contended,safety")
	checkRecords(t, recs, []string{"lockreg-pgx", "shedlock"}, []string{"uncontended", "contended", "safety"})
	for _, r := range recs {
		if r["scenario"] == "uncontended" {
			if v, ok := r["stmts_per_op"].(float64); !ok || v < 1 {
				t.Errorf("uncontended/%v: stmts_per_op = %v", r["contestant"], r["stmts_per_op"])
			}
		}
	}
}

func TestFlags(t *testing.T) {
	if _, err := parseFlags([]string{"-only", "nope"}, io.Discard); err == nil {
		t.Error("-only nope accepted")
	}
	if _, err := parseFlags([]string{"-scenarios", "nope"}, io.Discard); err == nil {
		t.Error("-scenarios nope accepted")
	}
	cfg, err := parseFlags([]string{"-quick"}, io.Discard)
	if err != nil || cfg.duration != time.Second || len(cfg.only) != len(contestants) {
		t.Errorf("-quick: %+v, %v", cfg, err)
	}
}

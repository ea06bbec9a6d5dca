package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/trace"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/lockreg/lockreg/resequencer"
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
			case "aggregator", "resequencer":
				if v, ok := r["violations"].(float64); !ok || v != 0 {
					t.Errorf("%s/%s: violations = %v, want a written 0", s, c, r["violations"])
				}
				for _, k := range []string{"msgs_per_sec", "handle_p50_us", "handle_p99_us"} {
					if v, ok := r[k].(float64); !ok || v <= 0 {
						t.Errorf("%s/%s: %s = %v", s, c, k, r[k])
					}
				}
				if v, ok := r["groups_completed"].(float64); !ok || v <= 0 {
					t.Errorf("%s/%s: groups_completed = %v: nothing checked", s, c, r["groups_completed"])
				}
				if out, want := r["outputs"], r["expected_outputs"]; out == nil || out != want {
					t.Errorf("%s/%s: outputs %v, expected %v", s, c, out, want)
				}
			}
		}
	}
}

// TestQuickSQLite needs no server.
func TestQuickSQLite(t *testing.T) {
	recs := runJSON(t, "-quick", "-duration", "300ms", "-warmup", "50ms", "-cache-keys", "2000", "-only", "lockreg-sqlite",
		"-scenarios", strings.Join(lockScenarios, ","))
	checkRecords(t, recs, []string{"lockreg-sqlite"}, lockScenarios)
}

// postgresReachable returns why PostgreSQL cannot be used, or "".
func postgresReachable() string {
	dsn := envOr("LOCKREG_POSTGRES_DSN", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	db, err := sql.Open("pgx", dsn)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		err = db.PingContext(ctx)
		cancel()
		db.Close()
	}
	if err != nil {
		return "PostgreSQL unreachable at " + dsn + " (set LOCKREG_POSTGRES_DSN): " + err.Error()
	}
	return ""
}

// skipWithoutPostgres skips t when PostgreSQL is unreachable, and fails it
// instead when CI=true.
func skipWithoutPostgres(t *testing.T) {
	t.Helper()
	if msg := postgresReachable(); msg != "" {
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg) // the server is unreachable
	}
}

// TestQuickPostgres runs one lockreg and one peer contestant on PostgreSQL.
func TestQuickPostgres(t *testing.T) {
	skipWithoutPostgres(t)
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

// mariadbReachable returns why MariaDB cannot be used, or "".
func mariadbReachable() string {
	dsn := envOr("LOCKREG_MYSQL_DSN", "root@tcp(127.0.0.1:3306)/test?parseTime=true")
	db, err := sql.Open("mysql", dsn)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		err = db.PingContext(ctx)
		cancel()
		db.Close()
	}
	if err != nil {
		return "MariaDB unreachable at " + dsn + " (set LOCKREG_MYSQL_DSN): " + err.Error()
	}
	return ""
}

// TestQuickGroups runs the aggregator and resequencer scenarios briefly, in
// memory, on SQLite and, when the servers are reachable, with 4 instances on
// PostgreSQL and on MariaDB; small shuffle blocks make groups complete within
// the short window, so that the outputs are checked. A violation fails it.
func TestQuickGroups(t *testing.T) {
	sqlVariants := []string{"sqlite-1"}
	for _, s := range []struct{ variant, msg string }{
		{"postgres-4", postgresReachable()}, {"mariadb-4", mariadbReachable()},
	} {
		switch {
		case s.msg == "":
			sqlVariants = append(sqlVariants, s.variant)
		case os.Getenv("CI") == "true":
			t.Fatal(s.msg)
		default:
			t.Log(s.variant + " left out: " + s.msg)
		}
	}
	recs := runJSON(t, "-duration", "300ms", "-warmup", "100ms", "-group-window", "5",
		"-scenarios", strings.Join(groupScenarios, ","), "-variants", "memory")
	// On SQL, unshuffled groups (blocks of one) and a longer window, so that
	// groups complete on a loaded machine too.
	recs = append(recs, runJSON(t, "-duration", "1s", "-warmup", "100ms", "-group-window", "1",
		"-scenarios", strings.Join(groupScenarios, ","), "-variants", strings.Join(sqlVariants, ","))...)
	variants := append([]string{"memory"}, sqlVariants...)
	checkRecords(t, recs, variants, groupScenarios)
	for _, r := range recs {
		if r["contestant"] == "memory" {
			continue
		}
		for _, k := range []string{"stmts_per_op", "commits_per_op"} {
			if v, ok := r[k].(float64); !ok || v <= 0 {
				t.Errorf("%v/%v: %s = %v, want the statements counted", r["scenario"], r["contestant"], k, r[k])
			}
		}
		if r["contestant"] == "postgres-4" {
			if v, ok := r["server_per_op"].(float64); !ok || v <= 0 {
				t.Errorf("%v/postgres-4: server_per_op = %v, want the transactions counted", r["scenario"], r["server_per_op"])
			}
		}
	}
}

// TestCountingPub checks that the output checks catch what they are for.
func TestCountingPub(t *testing.T) {
	p := &countingPub{scenario: "resequencer", prefix: "k/", states: make([]groupState, 2)}
	msg := func(g, seq string) *message.Message {
		m := message.NewMessage(g+seq, nil)
		m.Metadata.Set(resequencer.CorrelationIDKey, "k/"+g)
		m.Metadata.Set(resequencer.SequenceNumberKey, seq)
		return m
	}
	p.Publish("out", msg("0", "1"), msg("0", "3"), msg("0", "2"), msg("0", "2"), msg("1", "1"), msg("x", "1"))
	if d := p.states[0].disorder.Load(); d != 1 {
		t.Errorf("disorder = %d, want 1 (3 before 2)", d)
	}
	if d := p.states[0].dups.Load(); d != 1 {
		t.Errorf("dups = %d, want 1 (2 twice)", d)
	}
	if o := p.states[1].outputs.Load(); o != 1 || p.states[1].disorder.Load() != 0 {
		t.Errorf("group 1: outputs %d, disorder %d", o, p.states[1].disorder.Load())
	}
	if f := p.foreign.Load(); f != 1 {
		t.Errorf("foreign = %d, want 1", f)
	}
}

func TestFlags(t *testing.T) {
	if _, err := parseFlags([]string{"-only", "nope"}, io.Discard); err == nil {
		t.Error("-only nope accepted")
	}
	if _, err := parseFlags([]string{"-scenarios", "nope"}, io.Discard); err == nil {
		t.Error("-scenarios nope accepted")
	}
	if _, err := parseFlags([]string{"-variants", "nope"}, io.Discard); err == nil {
		t.Error("-variants nope accepted")
	}
	if _, err := parseFlags([]string{"-rounds", "0"}, io.Discard); err == nil {
		t.Error("-rounds 0 accepted")
	}
	cfg, err := parseFlags([]string{"-quick"}, io.Discard)
	if err != nil || cfg.duration != time.Second || len(cfg.only) != len(contestants) ||
		len(cfg.scenarios) != len(allScenarios) || len(cfg.variants) != len(groupVariants)+len(groupFloors) {
		t.Errorf("-quick: %+v, %v", cfg, err)
	}
}

// -trace names the file the run's execution trace goes to, and recording
// into it writes a trace there.
func TestTraceFlagRecordsATrace(t *testing.T) {
	file := filepath.Join(t.TempDir(), "run.trace")
	cfg, err := parseFlags([]string{"-trace", file}, io.Discard)
	if err != nil || cfg.traceFile != file {
		t.Fatalf("-trace %s: traceFile %q, %v", file, cfg.traceFile, err)
	}
	startRecording("trace", cfg.traceFile, trace.Start)
	trace.Stop()
	if fi, err := os.Stat(file); err != nil || fi.Size() == 0 {
		t.Fatalf("the trace file after recording: %v, %v", fi, err)
	}
}

// TestQuickOtel runs the otel scenario: lockreg-pgx without telemetry and
// with the SDK, each measured, the SDK's relative to the default.
func TestQuickOtel(t *testing.T) {
	skipWithoutPostgres(t)
	recs := runJSON(t, "-pgdb", "", "-duration", "300ms", "-warmup", "50ms", "-only", "lockreg-pgx", "-scenarios", otelScenario)
	var names []string
	for _, v := range otelVariants {
		names = append(names, v.name)
	}
	checkRecords(t, recs, names, []string{otelScenario})
	for _, r := range recs {
		if _, ok := r["relative_to_default"].(float64); !ok && r["contestant"] != otelVariants[0].name {
			t.Errorf("%v: no relative_to_default", r["contestant"])
		}
	}
}

// The counter tells commits by a statement's first word, in any case:
// COMMIT, and each statement outside a transaction but BEGIN and ROLLBACK.
func TestCounterCountsCommitsByTheFirstWord(t *testing.T) {
	var c counter
	for _, s := range []struct {
		inTx bool
		sql  string
	}{
		{false, "  begin"}, {true, "UPDATE t SET a = 1"}, {true, "Commit;"},
		{false, "\n\tSELECT 1"}, {false, "ROLLBACK"}, {true, "commit"},
	} {
		c.statement(s.inTx, s.sql)
	}
	if n, commits := c.n.Load(), c.commits.Load(); n != 6 || commits != 3 {
		t.Errorf("counted %d statements, %d commits; want 6, 3", n, commits)
	}
}

func TestARoundsContestantIsItsMedianRound(t *testing.T) {
	round := func(ops float64) result { return result{Scenario: "uncontended", Contestant: "c", OpsPerSec: fp(ops)} }
	if got := pickRound([]result{round(300), round(100), round(200)}); *got.OpsPerSec != 200 {
		t.Errorf("median of 300, 100, 200 = %v", *got.OpsPerSec)
	}
	if got := pickRound([]result{round(400), round(100), round(300), round(200)}); *got.OpsPerSec != 200 {
		t.Errorf("median of four = %v, want the lower middle, 200", *got.OpsPerSec)
	}
}

func TestEachRoundStartsOneContestantLaterSoThatEachRunsInEveryPlace(t *testing.T) {
	cs := []string{"a", "b", "c"}
	want := [][]string{{"a", "b", "c"}, {"b", "c", "a"}, {"c", "a", "b"}, {"a", "b", "c"}}
	for round, w := range want {
		if got := rotate(cs, round); !slices.Equal(got, w) {
			t.Errorf("round %d: order %v, want %v", round, got, w)
		}
	}
	if !slices.Equal(cs, []string{"a", "b", "c"}) {
		t.Errorf("rotate changed its argument: %v", cs)
	}
	if got := rotate([]string(nil), 1); len(got) != 0 {
		t.Errorf("rotate of none = %v", got)
	}
}

func TestAFailedRoundIsReportedNotOutvoted(t *testing.T) {
	failed := result{Scenario: "parallel", Contestant: "c", Skipped: "failed: boom"}
	ok := result{Scenario: "parallel", Contestant: "c", OpsPerSec: fp(100)}
	if got := pickRound([]result{ok, failed, ok}); got.Skipped != failed.Skipped {
		t.Errorf("picked %+v, want the failed round", got)
	}
}

func TestSafetyReportsItsRoundWithTheMostViolations(t *testing.T) {
	v := func(n int64, ops float64) result {
		return result{Scenario: "safety", Contestant: "c", Violations: &n, OpsPerSec: fp(ops)}
	}
	if got := pickRound([]result{v(0, 300), v(2, 100), v(0, 200)}); *got.Violations != 2 {
		t.Errorf("picked %d violations, want the round with 2", *got.Violations)
	}
}

func TestARoundWithViolationsIsReportedNotOutvoted(t *testing.T) {
	v := func(n int64, ops float64) result {
		return result{Scenario: "aggregator", Contestant: "postgres-4", Violations: &n, OpsPerSec: fp(ops)}
	}
	if got := pickRound([]result{v(0, 300), v(1, 100), v(0, 200)}); *got.Violations != 1 {
		t.Errorf("picked %d violations, want the round with 1", *got.Violations)
	}
	if got := pickRound([]result{v(0, 300), v(0, 100), v(0, 200)}); *got.OpsPerSec != 200 {
		t.Errorf("without violations picked %v ops/s, want the median, 200", *got.OpsPerSec)
	}
}

// TestAPartitionedFeedGivesEachGroupToOneInstance checks -group-partition's
// feed: every item once, all of a group's items in one channel.
func TestAPartitionedFeedGivesEachGroupToOneInstance(t *testing.T) {
	items := buildFeed("p/", 0, 40, 8, rand.New(rand.NewPCG(1, 2)))
	feeds := partitionFeed(items, 4)
	owner := map[int]int{}
	n := 0
	for i, f := range feeds {
		for it := range f {
			n++
			if o, ok := owner[it.group]; ok && o != i {
				t.Fatalf("group %d in feeds %d and %d", it.group, o, i)
			}
			owner[it.group] = i
		}
	}
	if n != len(items) || len(owner) != 40 {
		t.Errorf("%d items of %d groups in the feeds, want %d of 40", n, len(owner), len(items))
	}
	used := map[int]bool{}
	for _, o := range owner {
		used[o] = true
	}
	if len(used) != 4 {
		t.Errorf("%d of 4 feeds used", len(used))
	}
}

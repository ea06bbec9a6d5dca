package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const want = `account-1: 10 deposits, balance 55
account-2: 10 deposits, balance 55
account-3: 10 deposits, balance 55
`

// Every deposit counts once, although two instances handled the deposits
// of each account at the same time.
func TestExampleAppliesEveryDepositOnce(t *testing.T) {
	var out strings.Builder
	if err := run(&out, "sqlite:"+filepath.Join(t.TempDir(), "perkey.db"), 3, 10); err != nil {
		t.Fatal(err)
	}
	if out.String() != want {
		t.Errorf("output:\n%s\nwant:\n%s", out.String(), want)
	}
}

func TestExampleRunsOnPostgreSQL(t *testing.T) {
	dsn := os.Getenv("LOCKREG_POSTGRES_DSN")
	if dsn == "" {
		dsn = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	var out strings.Builder
	if err := run(&out, dsn, 3, 10); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skipf("postgres unreachable at %s: %v", dsn, err)
	}
	if out.String() != want {
		t.Errorf("output on PostgreSQL:\n%s\nwant:\n%s", out.String(), want)
	}
}

// Every line of the README's lockmw snippet is a line of main.go, so that
// the snippet compiles and runs in these tests.
func TestTheREADMESnippetIsInMain(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(readme), "## One message per key at a time (Watermill)\n")
	_, after, ok2 := strings.Cut(after, "```go\n")
	block, _, ok3 := strings.Cut(after, "```\n")
	if !ok || !ok2 || !ok3 {
		t.Fatal("README.md has no lockmw section with a go code block")
	}
	var lines []string
	for l := range strings.Lines(string(src)) {
		lines = append(lines, strings.TrimSpace(l))
	}
	for l := range strings.Lines(block) {
		if l := strings.TrimSpace(l); !slices.Contains(lines, l) {
			t.Errorf("the README's line %q is not in main.go", l)
		}
	}
}

package main

import (
	"context"
	"database/sql"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// The README's Quick start is the body of run, so that it compiles and
// runs in these tests.
func TestTheREADMEQuickStartIsTheBodyOfRun(t *testing.T) {
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "main.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	var body string
	for _, d := range f.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok && fn.Name.Name == "run" {
			b := src[fset.Position(fn.Body.Lbrace).Offset+1 : fset.Position(fn.Body.Rbrace).Offset]
			for line := range strings.Lines(strings.Trim(string(b), "\n")) {
				body += strings.TrimPrefix(line, "\t")
			}
		}
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(readme), "## Quick start\n")
	if !ok {
		t.Fatal("README.md has no Quick start section")
	}
	_, after, ok = strings.Cut(after, "```go\n")
	block, _, ok2 := strings.Cut(after, "```\n")
	if !ok || !ok2 {
		t.Fatal("the Quick start has no go code block")
	}
	if block != body+"\n" {
		t.Errorf("the README's Quick start:\n%s\ndiffers from the body of run in main.go:\n%s", block, body)
	}
}

func postgresDSN(t *testing.T) string {
	dsn := os.Getenv("LOCKREG_POSTGRES_DSN")
	if dsn == "" {
		dsn = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	db, err := sql.Open("pgx", dsn)
	if err == nil {
		err = db.PingContext(t.Context())
		db.Close()
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("postgres unreachable at %s (set LOCKREG_POSTGRES_DSN): %v", dsn, err)
		}
		t.Skipf("postgres unreachable at %s (set LOCKREG_POSTGRES_DSN): %v", dsn, err)
	}
	return dsn
}

// run saves every line, in order, under the lock's fencing token, and
// returns once done: with keep-alive, Done stays open while the lease is
// renewed.
func TestQuickStartSavesEveryLineUnderItsTokenAndReturns(t *testing.T) {
	dsn := postgresDSN(t)
	// Long enough for a lease left by a killed earlier run (30 s) to expire.
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	lines := []string{"a", "b", "c"}
	var (
		saved  []string
		tokens []int64
	)
	save := func(_ context.Context, line string, token int64) error {
		saved, tokens = append(saved, line), append(tokens, token)
		return nil
	}
	if err := run(ctx, dsn, lines, save); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(saved, lines) {
		t.Fatalf("saved %q, want %q", saved, lines)
	}
	for _, tok := range tokens {
		if tok <= 0 || tok != tokens[0] {
			t.Fatalf("tokens %v: want one positive token for the whole hold", tokens)
		}
	}
}

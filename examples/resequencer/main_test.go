package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The example prints each account's steps in order, although they arrived
// shuffled at two instances.
func TestExampleReleasesEachAccountsStepsInOrder(t *testing.T) {
	var out strings.Builder
	if err := run(&out, "sqlite:"+filepath.Join(t.TempDir(), "reseq.db"), 3, 5); err != nil {
		t.Fatal(err)
	}
	want := "account-1: 1 2 3 4 5\naccount-2: 1 2 3 4 5\naccount-3: 1 2 3 4 5\n"
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
	if err := run(&out, dsn, 2, 4); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skipf("postgres unreachable at %s: %v", dsn, err)
	}
	if want := "account-1: 1 2 3 4\naccount-2: 1 2 3 4\n"; out.String() != want {
		t.Errorf("output:\n%s\nwant:\n%s", out.String(), want)
	}
}

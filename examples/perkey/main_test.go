package main

import (
	"os"
	"path/filepath"
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

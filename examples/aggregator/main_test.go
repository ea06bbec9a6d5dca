package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The example prints each order once, with its three lines in sequence
// order, although the lines arrived out of order at two instances.
func TestExampleAggregatesEachOrderOnce(t *testing.T) {
	var out strings.Builder
	if err := run(&out, "sqlite:"+filepath.Join(t.TempDir(), "agg.db"), 4); err != nil {
		t.Fatal(err)
	}
	want := ""
	for _, o := range []string{"1", "2", "3", "4"} {
		want += "order-" + o + `: [{"sku":"SKU-` + o + `1","qty":1},{"sku":"SKU-` + o + `2","qty":2},{"sku":"SKU-` + o + `3","qty":3}]` + "\n"
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
	if err := run(&out, dsn, 2); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skipf("postgres unreachable at %s: %v", dsn, err)
	}
	if n := strings.Count(out.String(), "\n"); n != 2 {
		t.Errorf("got %d orders, want 2:\n%s", n, out.String())
	}
}

package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// wantOrders is the example's output for n orders.
func wantOrders(n int) string {
	want := ""
	for i := 1; i <= n; i++ {
		o := strconv.Itoa(i)
		want += "order-" + o + `: [{"sku":"SKU-` + o + `1","qty":1},{"sku":"SKU-` + o + `2","qty":2},{"sku":"SKU-` + o + `3","qty":3}]` + "\n"
	}
	return want
}

// The example prints each order once, with its three lines in sequence
// order, although the lines arrived out of order at two instances.
func TestExampleAggregatesEachOrderOnce(t *testing.T) {
	var out strings.Builder
	if err := run(&out, "sqlite:"+filepath.Join(t.TempDir(), "agg.db"), 4, nil); err != nil {
		t.Fatal(err)
	}
	if want := wantOrders(4); out.String() != want {
		t.Errorf("output:\n%s\nwant:\n%s", out.String(), want)
	}
}

func TestExampleRunsOnPostgreSQL(t *testing.T) {
	dsn := os.Getenv("LOCKREG_POSTGRES_DSN")
	if dsn == "" {
		dsn = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	var out strings.Builder
	if err := run(&out, dsn, 2, nil); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skipf("postgres unreachable at %s: %v", dsn, err)
	}
	if want := wantOrders(2); out.String() != want {
		t.Errorf("output with watermill-sql and an outbox:\n%s\nwant:\n%s", out.String(), want)
	}
}

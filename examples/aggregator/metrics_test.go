package main

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/lockreg/lockreg/aggregator"
	"github.com/lockreg/lockreg/groupstore/sqlstore"
	"github.com/lockreg/lockreg/jdbc"
	"github.com/lockreg/lockreg/registry"
)

// scrape returns the sum of the samples of metric name on the server's
// /metrics whose labels include every name="value" pair of labels.
func scrape(t *testing.T, addr, name string, labels ...string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET /metrics: %s\n%s", resp.Status, b)
	}
	sum := 0.0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		series, value, ok := strings.Cut(line, " ")
		metric, rest, _ := strings.Cut(series, "{")
		if !ok || metric != name {
			continue
		}
		match := true
		for _, l := range labels {
			match = match && strings.Contains(rest, l)
		}
		if !match {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			t.Fatalf("sample %q: %v", line, err)
		}
		sum += v
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return sum
}

// publisher keeps what the aggregator publishes.
type publisher struct{ out chan *message.Message }

func (p publisher) Publish(_ string, msgs ...*message.Message) error {
	for _, m := range msgs {
		p.out <- m
	}
	return nil
}
func (publisher) Close() error { return nil }

func line(order string, n int) *message.Message {
	m := message.NewMessage(watermill.NewUUID(), []byte(`{"sku":"x"}`))
	m.Metadata.Set("correlation_id", order)
	m.Metadata.Set("sequence_number", strconv.Itoa(n))
	m.Metadata.Set("sequence_size", "3")
	return m
}

// An aggregator on SQLite whose registry and repository record through the
// SDK into the example's Prometheus endpoint: a scrape sees the lock
// cycles, messages and groups move as messages flow, and sees the lease
// of a group whose output outlasts the lock's safety margin lost.
func TestPrometheusEndpointShowsMessagesFlowAndALostLease(t *testing.T) {
	srv, err := serveMetrics("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close(context.Background())
	ctx := context.Background()
	db, err := open("sqlite:" + filepath.Join(t.TempDir(), "metrics.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := sqlstore.CreateSchema(ctx, db, sqlstore.Config{}); err != nil {
		t.Fatal(err)
	}
	agg, locks := newMeteredAggregator(t, db, srv)
	defer locks.Close(ctx)

	for n := 1; n <= 3; n++ {
		if err := agg.Handle(line("fast", n)); err != nil {
			t.Fatal(err)
		}
	}
	for name, want := range map[string]float64{
		"lockreg_handler_messages_added_total":     3,
		"lockreg_handler_groups_completed_total":   1,
		"lockreg_lock_wait_duration_seconds_count": 3,
	} {
		if got := scrape(t, srv.Addr, name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if got := scrape(t, srv.Addr, "lockreg_lock_acquisitions_total", `lockreg_outcome="acquired"`, `lockreg_backend="sqlite"`); got != 3 {
		t.Errorf("acquisitions on sqlite = %v, want 3", got)
	}
	if got := scrape(t, srv.Addr, "lockreg_jdbc_statement_duration_seconds_count", `lockreg_operation="release"`); got != 3 {
		t.Errorf("release statements = %v, want 3", got)
	}
	if got := scrape(t, srv.Addr, "lockreg_lock_leases_lost_total"); got != 0 {
		t.Errorf("leases lost before any = %v", got)
	}

	// The output of "slow" waits until a scrape shows the lease lost: its
	// release then refuses to publish.
	for n := 1; n <= 2; n++ {
		if err := agg.Handle(line("slow", n)); err != nil {
			t.Fatal(err)
		}
	}
	stall.slow = func() {
		deadline := time.Now().Add(time.Minute)
		for scrape(t, srv.Addr, "lockreg_lock_leases_lost_total", `lockreg_reason="expired"`) < 1 {
			if time.Now().After(deadline) {
				t.Error("no lease lost within a minute")
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if err := agg.Handle(line("slow", 3)); !errors.Is(err, aggregator.ErrLockLost) {
		t.Fatalf("Handle with a stalled output: %v, want ErrLockLost", err)
	}
	if got := scrape(t, srv.Addr, "lockreg_lock_hold_duration_seconds_count", `lockreg_outcome="lost"`); got != 1 {
		t.Errorf("lost holds = %v, want 1", got)
	}
	if got := scrape(t, srv.Addr, "lockreg_handler_message_duration_seconds_count", `lockreg_outcome="error"`); got != 1 {
		t.Errorf("messages failed = %v, want 1", got)
	}
	if got := scrape(t, srv.Addr, "lockreg_handler_groups_completed_total"); got != 1 {
		t.Errorf("groups completed = %v, want still 1", got)
	}
}

// stall holds the output of group "slow" while slow runs.
var stall struct{ slow func() }

// newMeteredAggregator returns an aggregator on db whose registry (TTL
// 1 s, so that the safety margin passes at 800 ms) and repository record
// into srv.
func newMeteredAggregator(t *testing.T, db *sql.DB, srv *metricsServer) (*aggregator.Aggregator, *registry.Registry) {
	t.Helper()
	ctx := context.Background()
	region := "metrics-" + watermill.NewShortUUID()
	repo, err := jdbc.NewLockRepository(ctx, db, jdbc.WithRegion(region), jdbc.WithMeterProvider(srv.Provider))
	if err != nil {
		t.Fatal(err)
	}
	locks, err := registry.New(repo, registry.WithTTL(time.Second), registry.WithMeterProvider(srv.Provider))
	if err != nil {
		t.Fatal(err)
	}
	store, err := sqlstore.New(db, sqlstore.Config{Region: region})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close(context.Background()) })
	agg, err := aggregator.New(aggregator.Config{
		Publisher: publisher{make(chan *message.Message, 10)}, OutputTopic: "orders",
		Store: store, Locks: locks, Logger: watermill.NopLogger{},
		Output: func(g aggregator.Group) (*message.Message, error) {
			if g.Key == "slow" && stall.slow != nil {
				stall.slow()
			}
			return aggregator.DefaultOutput(g)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return agg, locks
}

package aggregator_test

import (
	"context"
	"testing"
	"time"

	"github.com/lockreg/lockreg/aggregator"
	tel "github.com/lockreg/lockreg/internal/telemetry"
	"github.com/lockreg/lockreg/internal/telemetry/telemetrytest"
	"github.com/lockreg/lockreg/registry"
)

// Messages added, duplicates and completed groups are counted, and the
// store's calls and each message's handling have their durations
// recorded.
func TestMetricsCountMessagesAndCompletedGroups(t *testing.T) {
	m := telemetrytest.NewMetrics()
	a, rec := newAgg(t, aggregator.Config{MeterProvider: m.Provider})
	handle(t, a, part("g", 1, 2), part("g", 1, 2), part("g", 2, 2))
	rec.WaitFor(t, "out", 1)
	agg := tel.Handler.String("aggregator")
	if n := m.Sum(t, "lockreg.handler.messages.added", agg, tel.Outcome.String("added")); n != 2 {
		t.Errorf("%d messages added, want 2", n)
	}
	if n := m.Sum(t, "lockreg.handler.messages.added", tel.Outcome.String("duplicate")); n != 1 {
		t.Errorf("%d duplicates, want 1", n)
	}
	if n := m.Sum(t, "lockreg.handler.groups.completed"); n != 1 {
		t.Errorf("%d groups completed, want 1", n)
	}
	if n := m.Count(t, "lockreg.handler.store.duration", tel.Operation.String("add")); n != 3 {
		t.Errorf("%d store adds recorded, want 3", n)
	}
	if n := m.Count(t, "lockreg.handler.message.duration", tel.Outcome.String("ok")); n != 3 {
		t.Errorf("%d messages handled, want 3", n)
	}
}

// An expired group whose messages are discarded counts as expired and
// discarded, and its messages as discarded with reason "expired".
func TestMetricsCountAnExpiredGroupAndItsDiscardedMessages(t *testing.T) {
	m := telemetrytest.NewMetrics()
	a, rec := newAgg(t, aggregator.Config{GroupTimeout: 20 * time.Millisecond, PollInterval: 5 * time.Millisecond,
		DiscardTopic: "discard", MeterProvider: m.Provider})
	handle(t, a, part("exp", 1, 3), part("exp", 2, 3))
	runTimeouts(t, a)
	rec.WaitFor(t, "discard", 2)
	waitSum(t, m, "lockreg.handler.groups.expired", 1)
	if n := m.Sum(t, "lockreg.handler.messages.discarded", tel.Reason.String("expired")); n != 2 {
		t.Errorf("%d messages discarded as expired, want 2", n)
	}
	if n := m.Sum(t, "lockreg.handler.groups.discarded"); n != 1 {
		t.Errorf("%d groups discarded, want 1", n)
	}
	if n := m.Sum(t, "lockreg.handler.groups.completed"); n != 0 {
		t.Errorf("%d groups completed, want 0", n)
	}
}

// waitSum waits until the counter name reaches want.
func waitSum(t *testing.T, m *telemetrytest.Metrics, name string, want int64) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for m.Sum(t, name) < want {
		if time.Now().After(deadline) {
			t.Fatalf("%s stayed below %d", name, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Each message's handling is a span, a child of the span of the message's
// context, and the group lock's spans descend from it; the handler takes
// its providers from a registry given as Locks.
func TestHandleSpanIsAChildOfTheMessageContextsSpan(t *testing.T) {
	s := telemetrytest.NewSpans()
	locks, err := registry.NewLocal(registry.WithTracerProvider(s.Provider))
	if err != nil {
		t.Fatal(err)
	}
	defer locks.Close(context.Background())
	a, _ := newAgg(t, aggregator.Config{Locks: locks})
	ctx, parent := s.Provider.Tracer("test").Start(context.Background(), "consume")
	msg := part("g", 1, 2)
	msg.SetContext(ctx)
	handle(t, a, msg)
	parent.End()
	h := s.Named("lockreg.aggregator.handle")
	if len(h) != 1 {
		t.Fatalf("%d handle spans, want 1", len(h))
	}
	if h[0].Parent().SpanID() != parent.SpanContext().SpanID() {
		t.Error("the handle span is not a child of the message context's span")
	}
	if v, _ := telemetrytest.Attr(h[0], tel.Group); v.AsString() != "g" {
		t.Errorf("handle span group %q", v.AsString())
	}
	acq := s.Named("lockreg.acquire")
	if len(acq) != 1 || acq[0].Parent().SpanID() != h[0].SpanContext().SpanID() {
		t.Error("the group lock's acquisition is not within the handle span")
	}
}

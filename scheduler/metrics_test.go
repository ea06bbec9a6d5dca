package scheduler_test

import (
	"context"
	"errors"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/lockreg/lockreg/internal/telemetry"
	"github.com/lockreg/lockreg/internal/telemetry/telemetrytest"
	"github.com/lockreg/lockreg/internal/testdb"
	"github.com/lockreg/lockreg/scheduler"
)

func TestMetricsCountExecutionsByOutcomeAndTheDueBacklog(t *testing.T) {
	b := testdb.SQLite(t)
	m := telemetrytest.NewMetrics()
	ok := recorder("ok", newRuns())
	bad := scheduler.OneTime("bad", func(context.Context, *scheduler.Execution) error { return errors.New("no") },
		scheduler.OnFailure(scheduler.RetryAfter(time.Hour)))
	cfg := newTable(t, b, ok, bad)
	cfg.MeterProvider = m.Provider
	s, err := scheduler.New(b.DB, cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.Schedule(ctxb, scheduler.Instance{Task: "ok", ID: "1"}, time.Now())
	s.Schedule(ctxb, scheduler.Instance{Task: "bad", ID: "1"}, time.Now())
	if n := m.Gauge(t, "lockreg.scheduler.due"); n != 2 {
		t.Fatalf("due %d before Start, want 2", n)
	}
	if err := s.Start(ctxb); err != nil {
		t.Fatal(err)
	}
	defer s.Stop(ctxb)
	testdb.WaitFor(t, "both outcomes", func() bool {
		return m.Sum(t, "lockreg.scheduler.executions", telemetry.Outcome.String("succeeded")) == 1 &&
			m.Sum(t, "lockreg.scheduler.executions", telemetry.Outcome.String("failed"), telemetry.Task.String("bad")) == 1
	})
	if n := m.Count(t, "lockreg.scheduler.start.delay"); n != 2 {
		t.Fatalf("%d start delays, want 2", n)
	}
}

func TestEachExecutionIsASpanCarryingItsFencingToken(t *testing.T) {
	b := testdb.SQLite(t)
	spans := telemetrytest.NewSpans()
	r := newRuns()
	cfg := newTable(t, b, recorder("job", r))
	cfg.TracerProvider = spans.Provider
	s := start(t, b, cfg)
	s.Schedule(ctxb, scheduler.Instance{Task: "job", ID: "1"}, time.Now())
	testdb.WaitFor(t, "the span", func() bool { return len(spans.Named("lockreg.scheduler.execute")) == 1 })
	span := spans.Named("lockreg.scheduler.execute")[0]
	if v, ok := telemetrytest.Attr(span, telemetry.Token); !ok || v.AsInt64() != 2 {
		t.Fatalf("token %v, want the picked version 2", v)
	}
	var _ sdktrace.ReadOnlySpan = span
}

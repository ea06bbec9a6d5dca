package scheduler

import (
	"context"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	tel "github.com/lockreg/lockreg/internal/telemetry"
)

const scope = "github.com/lockreg/lockreg/scheduler"

// telemetry holds a scheduler's instruments (nil without a MeterProvider),
// tracer (nil without a TracerProvider) and logger.
type telemetry struct {
	log    *slog.Logger
	tracer trace.Tracer
	base   []attribute.KeyValue

	executions metric.Int64Counter     // by task and outcome
	delay      metric.Float64Histogram // schedule-to-start, by task
	deadCount  metric.Int64Counter     // dead executions handled, by task
	unpicks    metric.Int64Counter     // handed back at Stop
	registered metric.Registration
}

func newTelemetry(s *settled, countDue func(context.Context) (int64, error)) (*telemetry, error) {
	t := &telemetry{log: s.Logger.With("scheduler", s.Name, "table", s.Table), tracer: tel.Tracer(s.TracerProvider, scope),
		base: []attribute.KeyValue{tel.Backend.String(s.d.System), tel.Region.String(s.Table)}}
	m := tel.Meter(s.MeterProvider, scope)
	if m == nil {
		return t, nil
	}
	in := tel.Instruments{M: m}
	t.executions = in.Counter("lockreg.scheduler.executions", "{execution}",
		"Executions that ended, by outcome: succeeded, failed, refused (taken from this scheduler), unrecorded.")
	t.delay = in.Seconds("lockreg.scheduler.start.delay", "Time from an execution's due time to its start.", tel.HoldBuckets)
	t.deadCount = in.Counter("lockreg.scheduler.dead", "{execution}", "Dead executions handled by this scheduler.")
	t.unpicks = in.Counter("lockreg.scheduler.unpicked", "{execution}", "Executions handed back at Stop.")
	due, err := m.Int64ObservableGauge("lockreg.scheduler.due", metric.WithUnit("{execution}"),
		metric.WithDescription("Unpicked executions of this scheduler's tasks whose time has come, by the database's clock, from New until Stop."))
	if err != nil {
		return nil, err
	}
	t.registered, err = m.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		n, err := countDue(ctx)
		if err == nil {
			o.ObserveInt64(due, n, metric.WithAttributes(t.base...))
		}
		return err
	}, due)
	if err != nil {
		return nil, err
	}
	return t, in.Err
}

// close unregisters the due gauge's callback, which queries the table.
func (t *telemetry) close() {
	if t.registered != nil {
		t.registered.Unregister()
	}
}

func (t *telemetry) attrs(kv ...attribute.KeyValue) metric.MeasurementOption {
	return metric.WithAttributes(append(kv, t.base...)...)
}

func (t *telemetry) started(e *Execution, picked time.Time) {
	if t.delay != nil {
		t.delay.Record(context.Background(), max(time.Since(e.Time), 0).Seconds(), t.attrs(tel.Task.String(e.Task)))
	}
}

func (t *telemetry) finished(e *Execution, outcome string) {
	if t.executions != nil {
		t.executions.Add(context.Background(), 1, t.attrs(tel.Task.String(e.Task), tel.Outcome.String(outcome)))
	}
}

func (t *telemetry) dead(e *Execution) {
	if t.deadCount != nil {
		t.deadCount.Add(context.Background(), 1, t.attrs(tel.Task.String(e.Task)))
	}
}

func (t *telemetry) unpicked(n int) {
	if t.unpicks != nil && n > 0 {
		t.unpicks.Add(context.Background(), int64(n), t.attrs())
	}
}

func (t *telemetry) picked(int) {}

func (t *telemetry) fetchFailed(err error) {
	t.log.Warn("scheduler: fetch failed; retrying", "err", err)
}

// startSpan starts the span of an execution; end ends it with the
// handler's error.
func (t *telemetry) startSpan(ctx context.Context, e *Execution) (context.Context, func(error)) {
	if t.tracer == nil {
		return ctx, func(error) {}
	}
	ctx, span := t.tracer.Start(ctx, "lockreg.scheduler.execute", trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(append([]attribute.KeyValue{tel.Task.String(e.Task),
			attribute.String("lockreg.task.instance", e.Instance), tel.Token.Int64(e.Version)}, t.base...)...))
	return ctx, func(err error) { tel.EndSpan(span, err) }
}

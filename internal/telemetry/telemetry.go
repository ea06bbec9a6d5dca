// Package telemetry holds what lockreg's packages share to report metrics,
// traces and logs through the OpenTelemetry API and log/slog: the
// attribute and log keys, the duration buckets, the check that tells a
// provider that does something from a no-op, and a rate limit for logs of
// repeated failures. Instrument names and units follow OpenTelemetry's
// semantic conventions; docs/observability.md lists every instrument.
package telemetry

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// Attribute keys of lockreg's metrics and spans. Metrics carry only the
// bounded ones (backend, region, outcome, operation, reason, handler);
// spans add the lock key and the client id.
const (
	Backend   = attribute.Key("lockreg.backend")    // "postgresql", "mysql", "sqlite", "local"...
	Region    = attribute.Key("lockreg.region")     // the lock table's region
	Client    = attribute.Key("lockreg.client")     // the repository's client id (spans only)
	LockKey   = attribute.Key("lockreg.lock.key")   // the key as the caller wrote it (spans only)
	Token     = attribute.Key("lockreg.lock.token") // the fencing token (spans only)
	Outcome   = attribute.Key("lockreg.outcome")    // what became of the operation
	Operation = attribute.Key("lockreg.operation")  // which operation
	Reason    = attribute.Key("lockreg.reason")     // why, where an outcome needs one
	Handler   = attribute.Key("lockreg.handler")    // "aggregator" or "resequencer"
	Name      = attribute.Key("lockreg.handler.name")
	Group     = attribute.Key("lockreg.group.key") // the correlation key (spans only)
	Task      = attribute.Key("lockreg.task")      // a tasklock task's name
	Role      = attribute.Key("lockreg.leader.role")
)

// DurationBuckets are the histogram bucket bounds, in seconds, of waits and
// store calls: from a tenth of a millisecond (a local lock cycle) to ten
// seconds (a long wait). HoldBuckets reach further, to ten minutes.
var (
	DurationBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
	HoldBuckets     = []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 600}
)

// Meter returns mp's meter for the instrumentation scope of package scope,
// or nil when mp is nil or OpenTelemetry's no-op, so that callers skip
// their instruments altogether by default.
func Meter(mp metric.MeterProvider, scope string) metric.Meter {
	switch mp.(type) {
	case nil, metricnoop.MeterProvider, *metricnoop.MeterProvider:
		return nil
	}
	return mp.Meter(scope)
}

// Tracer is Meter for traces.
func Tracer(tp trace.TracerProvider, scope string) trace.Tracer {
	switch tp.(type) {
	case nil, tracenoop.TracerProvider, *tracenoop.TracerProvider:
		return nil
	}
	return tp.Tracer(scope)
}

// Instruments makes instruments on a meter and keeps the first error: the
// API returns a working instrument even then (the SDK reports the error
// through otel.Handle), so a bad name is a bug the tests catch, not a
// reason to fail a constructor.
type Instruments struct {
	M   metric.Meter
	Err error
}

func (in *Instruments) keep(err error) {
	if in.Err == nil {
		in.Err = err
	}
}

// Counter makes a monotonic counter.
func (in *Instruments) Counter(name, unit, desc string) metric.Int64Counter {
	c, err := in.M.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
	in.keep(err)
	return c
}

// UpDown makes an up-down counter.
func (in *Instruments) UpDown(name, unit, desc string) metric.Int64UpDownCounter {
	c, err := in.M.Int64UpDownCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
	in.keep(err)
	return c
}

// Seconds makes a histogram of durations in seconds with the given bounds.
func (in *Instruments) Seconds(name, desc string, bounds []float64) metric.Float64Histogram {
	h, err := in.M.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc),
		metric.WithExplicitBucketBoundaries(bounds...))
	in.keep(err)
	return h
}

// Attrs is a precomputed attribute set as the options of a measurement,
// so that recording one allocates nothing for them.
type Attrs struct {
	Add    []metric.AddOption
	Record []metric.RecordOption
}

// NewAttrs returns the options of the attribute set of kvs.
func NewAttrs(kvs ...attribute.KeyValue) Attrs {
	o := metric.WithAttributeSet(attribute.NewSet(kvs...))
	return Attrs{Add: []metric.AddOption{o}, Record: []metric.RecordOption{o}}
}

// Since returns the seconds since start.
func Since(start time.Time) float64 { return time.Since(start).Seconds() }

// EndSpan ends span, marking it failed with err unless err is nil.
func EndSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// Link returns the link to the span ctx carries, if any.
func Link(ctx context.Context) []trace.Link {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return nil
	}
	return []trace.Link{{SpanContext: sc}}
}

package main

// The otel scenario: the uncontended cycle of lockreg-pgx with the default
// (no telemetry), with OpenTelemetry's SDK recording the metrics, and with
// the SDK recording the metrics and sampling every span, in rounds that
// alternate between the three so that a machine whose load drifts burdens
// each alike. See "Observability" in docs/benchmarks.md.

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/lockreg/lockreg/jdbc"
	"github.com/lockreg/lockreg/registry"
)

const (
	otelScenario = "otel"
	otelRounds   = 6
)

// otelVariant is one way of running lockreg-pgx in the otel scenario.
type otelVariant struct {
	name  string
	setUp func() (reg []registry.Option, repo []jdbc.Option, stop func())
}

var otelVariants = []otelVariant{
	{name: "lockreg-pgx (default, no-op)", setUp: func() ([]registry.Option, []jdbc.Option, func()) {
		return nil, nil, func() {}
	}},
	{name: "lockreg-pgx (SDK metrics)", setUp: func() ([]registry.Option, []jdbc.Option, func()) {
		mp := sdkMeters()
		return []registry.Option{registry.WithMeterProvider(mp)}, []jdbc.Option{jdbc.WithMeterProvider(mp)},
			func() { mp.Shutdown(context.Background()) }
	}},
	{name: "lockreg-pgx (SDK metrics + traces)", setUp: func() ([]registry.Option, []jdbc.Option, func()) {
		mp := sdkMeters()
		// Every span sampled and batched to an exporter that drops them:
		// what recording costs the caller, without an exporter's I/O.
		tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()),
			sdktrace.WithBatcher(tracetest.NewNoopExporter()))
		return []registry.Option{registry.WithMeterProvider(mp), registry.WithTracerProvider(tp)},
			[]jdbc.Option{jdbc.WithMeterProvider(mp)},
			func() { mp.Shutdown(context.Background()); tp.Shutdown(context.Background()) }
	}},
}

// sdkMeters is a meter provider of the SDK with a pull reader, as a
// Prometheus exporter has: measurements aggregate in memory until read.
func sdkMeters() *sdkmetric.MeterProvider {
	return sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
}

var _ metric.MeterProvider = (*sdkmetric.MeterProvider)(nil)

// otelRuns measures the variants in otelRounds interleaved rounds of a
// otelRounds-th of the measured time each and adds one result per
// variant: the medians of its rounds' cycles/s and percentiles, which a
// round that met a burst of load elsewhere moves least.
func otelRuns(ctx context.Context, e *env, cfg config, add func(result)) {
	base := contestants[slices.IndexFunc(contestants, func(c contestant) bool { return c.name == "lockreg-pgx" })]
	if err := e.unavailable(base); err != nil {
		for _, v := range otelVariants {
			add(result{Scenario: otelScenario, Contestant: v.name, Skipped: err.Error()})
		}
		return
	}
	round := cfg
	round.duration = max(cfg.duration/otelRounds, 100*time.Millisecond)
	rounds := make([][]result, len(otelVariants))
	var failed error
	for range otelRounds {
		for i, v := range otelVariants {
			regOpts, repoOpts, stop := v.setUp()
			c := base
			c.name, c.open = v.name, openLockregWith("pgx", false, regOpts, repoOpts)
			r, err := uncontended(ctx, e, c, round)
			stop()
			if err != nil {
				failed = err
				continue
			}
			rounds[i] = append(rounds[i], r)
			fmt.Fprintf(os.Stderr, "bench: otel round: %-36s %s cycles/s\n", v.name, f(r.OpsPerSec, 0))
		}
	}
	var baseOps float64
	for i, v := range otelVariants {
		res := result{Scenario: otelScenario, Contestant: v.name}
		if len(rounds[i]) < otelRounds {
			res.Skipped = fmt.Sprintf("failed: %v", failed)
			add(res)
			continue
		}
		res.OpsPerSec = fp(medianOf(rounds[i], func(r result) *float64 { return r.OpsPerSec }))
		res.AcqP50us = fp(medianOf(rounds[i], func(r result) *float64 { return r.AcqP50us }))
		res.AcqP99us = fp(medianOf(rounds[i], func(r result) *float64 { return r.AcqP99us }))
		res.RelP50us = fp(medianOf(rounds[i], func(r result) *float64 { return r.RelP50us }))
		res.RelP99us = fp(medianOf(rounds[i], func(r result) *float64 { return r.RelP99us }))
		res.StmtsPerOp = rounds[i][0].StmtsPerOp
		if i == 0 {
			baseOps = *res.OpsPerSec
		} else if baseOps > 0 {
			res.RelToDefault = fp(*res.OpsPerSec / baseOps)
		}
		add(res)
	}
}

func medianOf(rs []result, get func(result) *float64) float64 {
	var vs []float64
	for _, r := range rs {
		if p := get(r); p != nil {
			vs = append(vs, *p)
		}
	}
	if len(vs) == 0 {
		return 0
	}
	slices.Sort(vs)
	return vs[len(vs)/2]
}

// otelSection writes the otel scenario's table.
func otelSection(section func(s, title, header string, row func(r result) string), cfg config) {
	section(otelScenario, fmt.Sprintf("otel: the uncontended cycle of lockreg-pgx without and with OpenTelemetry's SDK, %d interleaved rounds of %v", otelRounds,
		max(cfg.duration/otelRounds, 100*time.Millisecond).Round(time.Millisecond)),
		"| variant | cycles/s | relative to the default | acquire p50 / p99 µs | release p50 / p99 µs | stmts/cycle (client) |",
		func(r result) string {
			rel := "1"
			if r.RelToDefault != nil {
				rel = f(r.RelToDefault, 3)
			}
			return strings.Join([]string{f(r.OpsPerSec, 0), rel, f(r.AcqP50us, 0) + " / " + f(r.AcqP99us, 0),
				f(r.RelP50us, 0) + " / " + f(r.RelP99us, 0), f(r.StmtsPerOp, 2)}, " | ")
		})
}

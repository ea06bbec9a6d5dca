package redislock

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	tel "github.com/lockreg/lockreg/internal/telemetry"
)

// scope is the instrumentation scope of the repository's meter.
const scope = "github.com/lockreg/lockreg/redislock"

// WithMeterProvider makes the repository record the duration of its Redis
// commands with mp ("lockreg.redis.command.duration", s, one per script
// run, a NOSCRIPT fallback to EVAL included, by operation: acquire (Acquire
// and AcquireOrWait), handed (HandedLease), leave, renew, release (Release
// and Close's), and outcome: ok or error) and count the pub/sub listener's
// sessions that failed and are re-opened
// ("lockreg.redis.listener.reconnects"); docs/observability.md lists them.
// Without it, or with OpenTelemetry's no-op provider, it records nothing,
// at the cost of a nil check per command, with no clock read. The
// registry's own metrics (registry.WithMeterProvider) count acquisitions
// and waits.
func WithMeterProvider(mp metric.MeterProvider) Option { return func(o *options) { o.meters = mp } }

// op is an operation of the repository, one script each.
type op int

const (
	opAcquire op = iota
	opHanded
	opLeave
	opRenew
	opRelease
	numOps
)

var opNames = [numOps]string{opAcquire: "acquire", opHanded: "handed", opLeave: "leave", opRenew: "renew", opRelease: "release"}

// repoTel is a repository's instruments, nil without a meter provider.
type repoTel struct {
	commands   metric.Float64Histogram
	reconnects metric.Int64Counter
	base       tel.Attrs
	byOp       [numOps][2]tel.Attrs // by op, then ok (0) or error (1); read-only once made
}

// newTelemetry sets up the instruments of c. It does no I/O.
func (c *config) newTelemetry() error {
	meter := tel.Meter(c.meters, scope)
	if meter == nil {
		return nil
	}
	in := &tel.Instruments{M: meter}
	t := &repoTel{
		commands: in.Seconds("lockreg.redis.command.duration",
			"Duration of the repository's Redis commands (one per script), by operation and outcome (ok or error).",
			tel.DurationBuckets),
		reconnects: in.Counter("lockreg.redis.listener.reconnects", "{reconnect}",
			"Sessions of the pub/sub listener that failed and are re-opened."),
	}
	attrs := []attribute.KeyValue{tel.Backend.String(backend), tel.Region.String(c.region)}
	t.base = tel.NewAttrs(attrs...)
	for o, name := range opNames {
		for i, outcome := range [2]string{"ok", "error"} {
			t.byOp[o][i] = tel.NewAttrs(append([]attribute.KeyValue{tel.Operation.String(name), tel.Outcome.String(outcome)}, attrs...)...)
		}
	}
	c.tel = t
	return in.Err
}

// now returns the time a command starts, or the zero time without
// instruments, which then read no clock.
func (t *repoTel) now() time.Time {
	if t == nil {
		return time.Time{}
	}
	return time.Now()
}

// command records a command of o that started at start and ended with err.
func (t *repoTel) command(o op, start time.Time, err error) {
	if t == nil {
		return
	}
	i := 0
	if err != nil {
		i = 1
	}
	t.commands.Record(context.Background(), tel.Since(start), t.byOp[o][i].Record...)
}

// reconnect counts a failed listener session.
func (t *repoTel) reconnect() {
	if t != nil {
		t.reconnects.Add(context.Background(), 1, t.base.Add...)
	}
}

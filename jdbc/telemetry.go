package jdbc

import (
	"context"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	tel "github.com/lockreg/lockreg/internal/telemetry"
	"github.com/lockreg/lockreg/registry"
)

// scope is the instrumentation scope of the repository's meter.
const scope = "github.com/lockreg/lockreg/jdbc"

// WithLogger sets the logger of the errors of the repository's background
// work (the listener's, the clean-up's) when no WithErrorHandler takes
// them (default: slog.Default() as it is when they occur). Records have
// the fields region, client and backend, and err; a failure that repeats
// (the listener reconnecting, the clean-up failing pass after pass) is
// logged at most once per 10 s, with a count of the ones held back.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithMeterProvider makes the repository record the duration of its
// statements with mp ("lockreg.jdbc.statement.duration", by operation
// and outcome) and count the listener's reconnections
// ("lockreg.jdbc.listener.reconnects"); docs/observability.md lists them.
// Without it, or with OpenTelemetry's no-op provider, it records nothing.
// The registry's own metrics (registry.WithMeterProvider) count
// acquisitions and waits; trace the statements themselves with a traced
// driver (and WithDialect).
func WithMeterProvider(mp metric.MeterProvider) Option { return func(o *options) { o.meters = mp } }

// Describe names the repository's backend, region and client for the
// registry's metrics, spans and logs (registry.Describer). It does no I/O.
func (r *LockRepository) Describe() registry.Description {
	return r.cfg.describe()
}

var _ registry.Describer = (*LockRepository)(nil)

func (c *config) describe() registry.Description {
	return registry.Description{Backend: c.d.System, Region: c.region, Client: c.clientID}
}

// repoTel is a repository's instruments, nil without a meter provider.
type repoTel struct {
	statements metric.Float64Histogram
	reconnects metric.Int64Counter
	base       tel.Attrs
	attrs      []attribute.KeyValue
}

// newTelemetry sets up the logger and instruments of c. It does no I/O.
func (c *config) newTelemetry() error {
	d := c.describe()
	c.log = tel.NewLogger(c.logger, tel.LogBackend, d.Backend, tel.LogRegion, d.Region, tel.LogClient, d.Client)
	meter := tel.Meter(c.meters, scope)
	if meter == nil {
		return nil
	}
	in := &tel.Instruments{M: meter}
	t := &repoTel{
		statements: in.Seconds("lockreg.jdbc.statement.duration",
			"Duration of the repository's lock statements, by operation and outcome (ok or error).", tel.DurationBuckets),
		reconnects: in.Counter("lockreg.jdbc.listener.reconnects", "{reconnect}",
			"Sessions of the notification listener that failed and are re-opened."),
		attrs: []attribute.KeyValue{tel.Backend.String(d.Backend), tel.Region.String(d.Region)},
	}
	t.base = tel.NewAttrs(t.attrs...)
	c.tel = t
	return in.Err
}

// reporter returns the function that receives background errors of kind:
// the error handler, or the rate-limited logger.
func (c *config) reporter(kind string) func(error) {
	if c.onError != nil {
		return c.onError
	}
	log := c.log
	return func(err error) { log.Repeated(kind, "lockreg: jdbc", err) }
}

// stmtTel records the durations of one statement.
type stmtTel struct {
	h          metric.Float64Histogram
	ok, failed tel.Attrs
}

// stmt returns the recorder of operation op's statement, nil without
// instruments.
func (t *repoTel) stmt(op string) *stmtTel {
	if t == nil {
		return nil
	}
	with := func(o string) tel.Attrs {
		return tel.NewAttrs(append([]attribute.KeyValue{tel.Operation.String(op), tel.Outcome.String(o)}, t.attrs...)...)
	}
	return &stmtTel{h: t.statements, ok: with("ok"), failed: with("error")}
}

// record records a statement that started at start and returned err.
func (s *stmtTel) record(ctx context.Context, start time.Time, err error) {
	a := s.ok
	if err != nil {
		a = s.failed
	}
	s.h.Record(context.WithoutCancel(ctx), tel.Since(start), a.Record...)
}

// reconnect counts a failed listener session.
func (t *repoTel) reconnect() {
	if t != nil {
		t.reconnects.Add(context.Background(), 1, t.base.Add...)
	}
}

package etcdlock

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	tel "github.com/lockreg/lockreg/internal/telemetry"
)

// scope is the instrumentation scope of the repository's meter.
const scope = "github.com/lockreg/lockreg/etcdlock"

// WithMeterProvider makes the repository record the duration of its etcd
// requests with mp ("lockreg.etcd.request.duration", s, by operation:
// grant, acquire (transactions that write an entry), release (the
// transaction that deletes a released entry), keepalive, revoke, read,
// and outcome: ok or error) and
// count the watches that wake waiters and failed
// ("lockreg.etcd.watch.failures"). Without it, or with OpenTelemetry's
// no-op provider, it records nothing, at the cost of a nil check per
// request. The registry's own metrics (registry.WithMeterProvider) count
// acquisitions and waits.
func WithMeterProvider(mp metric.MeterProvider) Option { return func(o *options) { o.meters = mp } }

// repoTel is a repository's instruments, nil without a meter provider.
type repoTel struct {
	requests metric.Float64Histogram
	failures metric.Int64Counter
	attrs    []attribute.KeyValue
	base     tel.Attrs
	mu       sync.Mutex
	byOp     map[[2]string]tel.Attrs
}

// newTelemetry sets up the instruments of c. It does no I/O.
func (c *config) newTelemetry() error {
	meter := tel.Meter(c.meters, scope)
	if meter == nil {
		return nil
	}
	in := &tel.Instruments{M: meter}
	t := &repoTel{
		requests: in.Seconds("lockreg.etcd.request.duration",
			"Duration of the repository's etcd requests, by operation and outcome (ok or error).", tel.DurationBuckets),
		failures: in.Counter("lockreg.etcd.watch.failures", "{failure}",
			"Watches that wake waiters and failed, to be retried."),
		attrs: []attribute.KeyValue{tel.Backend.String(backend), tel.Region.String(c.region)},
		byOp:  make(map[[2]string]tel.Attrs),
	}
	t.base = tel.NewAttrs(t.attrs...)
	c.tel = t
	return in.Err
}

// request records a request of op that started at start and ended with err.
func (t *repoTel) request(op string, start time.Time, err error) {
	if t == nil {
		return
	}
	outcome := "ok"
	if err != nil {
		outcome = "error"
	}
	k := [2]string{op, outcome}
	t.mu.Lock()
	a, ok := t.byOp[k]
	if !ok {
		a = tel.NewAttrs(append([]attribute.KeyValue{tel.Operation.String(op), tel.Outcome.String(outcome)}, t.attrs...)...)
		t.byOp[k] = a
	}
	t.mu.Unlock()
	t.requests.Record(context.Background(), tel.Since(start), a.Record...)
}

// watchFailed counts a failed watch.
func (t *repoTel) watchFailed() {
	if t != nil {
		t.failures.Add(context.Background(), 1, t.base.Add...)
	}
}

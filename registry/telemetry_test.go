package registry_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	tel "github.com/lockreg/lockreg/internal/telemetry"
	"github.com/lockreg/lockreg/internal/telemetry/telemetrytest"
	"github.com/lockreg/lockreg/registry"
	"github.com/lockreg/lockreg/registry/registrytest"
)

func outcome(o string) attribute.KeyValue { return tel.Outcome.String(o) }

// Acquisitions are counted by outcome, with the repository's backend, and
// each has its wait recorded.
func TestMetricsCountAcquisitionsByOutcome(t *testing.T) {
	m := telemetrytest.NewMetrics()
	r := newReg(t, registry.NewLocalRepository(), registry.WithMeterProvider(m.Provider))
	l := r.Obtain("k")
	l.Lock()
	if r.Obtain("k").TryLock() {
		t.Fatal("TryLock of a held lock succeeded")
	}
	l.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := l.LockContext(ctx); err == nil {
		t.Fatal("LockContext with a canceled context succeeded")
	}
	local := tel.Backend.String("local")
	for o, want := range map[string]int64{"acquired": 1, "not_acquired": 1, "error": 1} {
		if got := m.Sum(t, "lockreg.lock.acquisitions", outcome(o), local); got != want {
			t.Errorf("acquisitions %s: %d, want %d", o, got, want)
		}
	}
	if n := m.Count(t, "lockreg.lock.wait.duration"); n != 3 {
		t.Errorf("%d waits recorded, want 3", n)
	}
	if u := m.Unit(t, "lockreg.lock.acquisitions"); u != "{acquisition}" {
		t.Errorf("unit %q", u)
	}
}

// A hold is counted as held until its unlock, which records its duration.
func TestMetricsRecordHeldLocksAndHoldDurations(t *testing.T) {
	m := telemetrytest.NewMetrics()
	r := newReg(t, registry.NewLocalRepository(), registry.WithMeterProvider(m.Provider))
	l := r.Obtain("k")
	l.Lock()
	if n := m.Sum(t, "lockreg.lock.held"); n != 1 {
		t.Fatalf("%d held while locked, want 1", n)
	}
	l.Unlock()
	if n := m.Sum(t, "lockreg.lock.held"); n != 0 {
		t.Errorf("%d held after unlock, want 0", n)
	}
	if n := m.Count(t, "lockreg.lock.hold.duration", outcome("released")); n != 1 {
		t.Errorf("%d released holds recorded, want 1", n)
	}
}

// A hold whose safety margin passes unrenewed counts as a lease lost
// (expired), once, and its release as lost when another client took it.
func TestMetricsCountALeaseLostOnceWhenItExpiresAndIsTaken(t *testing.T) {
	m := telemetrytest.NewMetrics()
	mem := registrytest.NewMemory()
	r := newReg(t, mem.NewClient(), registry.WithMeterProvider(m.Provider), registry.WithTTL(100*time.Millisecond),
		registry.WithErrorHandler(func(string, error) {}))
	other := newReg(t, mem.NewClient())
	l := r.Obtain("k")
	l.Lock()
	<-l.Done()
	if err := other.Obtain("k").LockContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := l.UnlockContext(context.Background()); !errors.Is(err, registry.ErrLockLost) {
		t.Fatalf("unlock: %v, want ErrLockLost", err)
	}
	if n := m.Sum(t, "lockreg.lock.leases_lost", tel.Reason.String("expired")); n != 1 {
		t.Errorf("%d leases lost by expiry, want 1", n)
	}
	if n := m.Sum(t, "lockreg.lock.leases_lost"); n != 1 {
		t.Errorf("%d leases lost in all, want 1", n)
	}
	if n := m.Count(t, "lockreg.lock.hold.duration", outcome("lost")); n != 1 {
		t.Errorf("%d lost holds recorded, want 1", n)
	}
}

// Renewals are counted by outcome, and the transient errors retried on the
// way by operation.
func TestMetricsCountRenewalsAndRetries(t *testing.T) {
	m := telemetrytest.NewMetrics()
	repo, _ := newHooked()
	fail := failing(2)
	repo.renew = func(context.Context) (bool, error) { return fail() }
	l := newReg(t, repo, registry.WithMeterProvider(m.Provider), registry.WithErrorHandler(func(string, error) {})).Obtain("k")
	l.Lock()
	if err := l.Renew(context.Background()); err != nil {
		t.Fatal(err)
	}
	repo.renew = func(context.Context) (bool, error) { return true, registry.ErrLockLost }
	if err := l.Renew(context.Background()); !errors.Is(err, registry.ErrLockLost) {
		t.Fatalf("renew: %v, want ErrLockLost", err)
	}
	l.UnlockContext(context.Background())
	if n := m.Sum(t, "lockreg.lock.renewals", outcome("renewed")); n != 1 {
		t.Errorf("%d renewed, want 1", n)
	}
	if n := m.Sum(t, "lockreg.lock.renewals", outcome("lost")); n != 1 {
		t.Errorf("%d renewals lost, want 1", n)
	}
	if n := m.Sum(t, "lockreg.lock.retries", tel.Operation.String("renew")); n != 2 {
		t.Errorf("%d renewal retries, want 2", n)
	}
	if n := m.Sum(t, "lockreg.lock.leases_lost", tel.Reason.String("renewal")); n != 1 {
		t.Errorf("%d leases lost by renewal, want 1", n)
	}
}

// A lock cycle makes an acquire span and a hold span, both children of the
// caller's span, and a release span within the hold.
func TestSpansOfALockCycle(t *testing.T) {
	s := telemetrytest.NewSpans()
	r := newReg(t, registry.NewLocalRepository(), registry.WithTracerProvider(s.Provider))
	ctx, parent := s.Provider.Tracer("test").Start(context.Background(), "caller")
	l := r.Obtain("orders/1")
	if err := l.LockContext(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.UnlockContext(ctx); err != nil {
		t.Fatal(err)
	}
	parent.End()
	acq, hold, rel := s.Named("lockreg.acquire"), s.Named("lockreg.hold"), s.Named("lockreg.release")
	if len(acq) != 1 || len(hold) != 1 || len(rel) != 1 {
		t.Fatalf("%d acquire, %d hold, %d release spans, want one each", len(acq), len(hold), len(rel))
	}
	want := parent.SpanContext().SpanID()
	if acq[0].Parent().SpanID() != want || hold[0].Parent().SpanID() != want {
		t.Errorf("acquire and hold spans are not the caller's children")
	}
	if rel[0].Parent().SpanID() != hold[0].SpanContext().SpanID() {
		t.Errorf("the release span is not within the hold span")
	}
	if v, _ := telemetrytest.Attr(acq[0], tel.LockKey); v.AsString() != "orders/1" {
		t.Errorf("acquire span key %q", v.AsString())
	}
	if v, _ := telemetrytest.Attr(acq[0], tel.Outcome); v.AsString() != "acquired" {
		t.Errorf("acquire span outcome %q", v.AsString())
	}
}

// OpenTelemetry's no-op providers cost what no provider costs: nothing is
// allocated for them.
func TestNoopProvidersAllocateNothingMore(t *testing.T) {
	cycle := func(opts ...registry.Option) float64 {
		l := newReg(t, registry.NewLocalRepository(), opts...).Obtain("k")
		return testing.AllocsPerRun(200, func() {
			l.Lock()
			l.Unlock()
		})
	}
	none := cycle()
	noop := cycle(registry.WithMeterProvider(metricnoop.NewMeterProvider()), registry.WithTracerProvider(tracenoop.NewTracerProvider()))
	if noop > none {
		t.Errorf("%v allocations per cycle with no-op providers, %v without", noop, none)
	}
}

// The default error handler logs to WithLogger's logger with the key and
// backend, and logs a transient failure retried many times once.
func TestLoggerGetsFieldsAndRepeatedFailuresOnce(t *testing.T) {
	var buf bytes.Buffer
	repo, _ := newHooked()
	fail := failing(5)
	repo.acquire = func(context.Context) (bool, bool, error) { h, err := fail(); return h, false, err }
	l := newReg(t, repo, registry.WithLogger(slog.New(slog.NewTextHandler(&buf, nil)))).Obtain("k")
	l.Lock()
	l.Unlock()
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 1 {
		t.Fatalf("%d records for 5 retried failures, want 1:\n%s", len(lines), buf.String())
	}
	for _, want := range []string{"key=k", "backend=other", "err=", "injected"} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("record %q lacks %q", lines[0], want)
		}
	}
}

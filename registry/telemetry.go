package registry

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	tel "github.com/lockreg/lockreg/internal/telemetry"
)

// scope is the instrumentation scope of the registry's meter and tracer.
const scope = "github.com/lockreg/lockreg/registry"

// telemetry is a registry's instruments and tracer, made once by New. A
// registry without a meter or tracer provider has none (nil), so that its
// default costs one nil check per hook and no allocation.
type telemetry struct {
	tracer trace.Tracer // nil without WithTracerProvider
	m      *instruments // nil without WithMeterProvider
	span   []attribute.KeyValue
}

// The outcomes that index the precomputed attribute sets.
const (
	acquired = iota
	notAcquired
	failed
)

type retryOp int

const (
	retryAcquire retryOp = iota
	retryRenew
	retryRelease
	retryKeepAlive
)

type lossReason int

const (
	lossNone    lossReason = iota // ended by unlock
	lossExpired                   // the safety margin passed unrenewed
	lossRenewal                   // a renewal found the lease lost
	lossRelease                   // the unlock found the lease lost
)

type instruments struct {
	acquisitions metric.Int64Counter
	wait         metric.Float64Histogram
	hold         metric.Float64Histogram
	held         metric.Int64UpDownCounter
	lost         metric.Int64Counter
	renewals     metric.Int64Counter
	handoffs     metric.Int64Counter
	retries      metric.Int64Counter

	base    tel.Attrs
	acquire [3]tel.Attrs // acquired, not_acquired, error
	release [3]tel.Attrs // released, lost, error
	renew   [3]tel.Attrs // renewed, lost, error
	loss    [4]tel.Attrs // by lossReason; [0] unused
	retry   [4]tel.Attrs // by retryOp
}

// newTelemetry returns the telemetry of a registry on repo, nil if it
// reports nothing.
func newTelemetry(o *options, d Description) (*telemetry, error) {
	meter, tracer := tel.Meter(o.meters, scope), tel.Tracer(o.tracers, scope)
	if meter == nil && tracer == nil {
		return nil, nil
	}
	t := &telemetry{tracer: tracer}
	common := []attribute.KeyValue{tel.Backend.String(d.Backend), tel.Region.String(d.Region)}
	t.span = append(common, tel.Client.String(d.Client))
	if meter == nil {
		return t, nil
	}
	in := &tel.Instruments{M: meter}
	m := &instruments{
		acquisitions: in.Counter("lockreg.lock.acquisitions", "{acquisition}",
			"Lock acquisitions by outcome: acquired, not_acquired (held elsewhere until the call gave up) or error."),
		wait: in.Seconds("lockreg.lock.wait.duration",
			"Time from a lock call to its outcome: the local wait, the repository calls and the waits between them.", tel.DurationBuckets),
		hold: in.Seconds("lockreg.lock.hold.duration",
			"Time from an acquisition to the end of its release, by outcome: released, lost (Done closed before the unlock, or the unlock found the lease taken) or error.", tel.HoldBuckets),
		held: in.UpDown("lockreg.lock.held", "{lock}", "Locks held by this registry now."),
		lost: in.Counter("lockreg.lock.leases_lost", "{lease}",
			"Holds whose lease was lost or given up before unlock, by reason: expired (not renewed before the safety margin), renewal or release (found taken)."),
		renewals: in.Counter("lockreg.lock.renewals", "{renewal}",
			"Lease renewals, explicit and keep-alive, by outcome: renewed, lost or error."),
		handoffs: in.Counter("lockreg.lock.handoffs", "{handoff}",
			"Acquisitions that took a lease a release handed to this client."),
		retries: in.Counter("lockreg.lock.retries", "{retry}",
			"Transient repository errors retried, by operation: acquire, renew, release or keep_alive."),
	}
	with := func(kv ...attribute.KeyValue) tel.Attrs { return tel.NewAttrs(append(kv, common...)...) }
	m.base = with()
	for i, o := range []string{"acquired", "not_acquired", "error"} {
		m.acquire[i] = with(tel.Outcome.String(o))
	}
	for i, o := range []string{"released", "lost", "error"} {
		m.release[i] = with(tel.Outcome.String(o))
	}
	for i, o := range []string{"renewed", "lost", "error"} {
		m.renew[i] = with(tel.Outcome.String(o))
	}
	for i, r := range []string{"", "expired", "renewal", "release"} {
		m.loss[i] = with(tel.Reason.String(r))
	}
	for i, op := range []string{"acquire", "renew", "release", "keep_alive"} {
		m.retry[i] = with(tel.Operation.String(op))
	}
	t.m = m
	return t, in.Err
}

// outcome classifies the result of an acquisition or renewal.
func outcome(ok bool, err error) int {
	switch {
	case err != nil:
		return failed
	case ok:
		return acquired
	}
	return notAcquired
}

// acquireOp is the telemetry of one lock call, from its start to its
// outcome. The context it returns carries it, so that the hold it takes
// descends from the caller's span, not from the acquisition's.
type acquireOp struct {
	t      *telemetry
	parent context.Context
	start  time.Time
	span   trace.Span // nil without a tracer
}

type acquireOpKey struct{}

func (t *telemetry) startAcquire(ctx context.Context, key string) (context.Context, *acquireOp) {
	op := &acquireOp{t: t, parent: ctx, start: time.Now()}
	if t.tracer != nil {
		ctx, op.span = t.tracer.Start(ctx, "lockreg.acquire", trace.WithAttributes(t.span...),
			trace.WithAttributes(tel.LockKey.String(key)))
	}
	return context.WithValue(ctx, acquireOpKey{}, op), op
}

func (op *acquireOp) end(ok bool, err error) {
	o := outcome(ok, err)
	if m := op.t.m; m != nil {
		m.acquisitions.Add(op.parent, 1, m.acquire[o].Add...)
		m.wait.Record(op.parent, tel.Since(op.start), m.acquire[o].Record...)
	}
	if op.span != nil {
		op.span.SetAttributes(tel.Outcome.String([]string{"acquired", "not_acquired", "error"}[o]))
		tel.EndSpan(op.span, err)
	}
}

// holdTel is the telemetry of one hold.
type holdTel struct {
	t     *telemetry
	start time.Time
	span  trace.Span // nil without a tracer
}

// startHold starts the telemetry of a hold of key, taken by the
// acquisition ctx carries.
func (t *telemetry) startHold(ctx context.Context, key string, token int64) *holdTel {
	if t == nil {
		return nil
	}
	parent := ctx
	if op, ok := ctx.Value(acquireOpKey{}).(*acquireOp); ok {
		parent = op.parent
	}
	h := &holdTel{t: t, start: time.Now()}
	if m := t.m; m != nil {
		m.held.Add(parent, 1, m.base.Add...)
	}
	if t.tracer != nil {
		_, h.span = t.tracer.Start(parent, "lockreg.hold", trace.WithAttributes(t.span...),
			trace.WithAttributes(tel.LockKey.String(key), tel.Token.Int64(token)),
			trace.WithLinks(trace.LinkFromContext(ctx)))
	}
	return h
}

// startRelease returns the context of the release of the hold, in the
// hold's span.
func (h *holdTel) startRelease(ctx context.Context) (context.Context, trace.Span) {
	if h.span == nil {
		return ctx, nil
	}
	return h.t.tracer.Start(trace.ContextWithSpan(ctx, h.span), "lockreg.release")
}

// ended records the end of the hold by a release that returned err;
// lostBefore says the hold had been lost before.
func (h *holdTel) ended(ctx context.Context, span trace.Span, lostBefore bool, err error) {
	o := 0
	switch {
	case errors.Is(err, ErrLockLost):
		o = 1
		if !lostBefore {
			h.lost(lossRelease)
		}
	case lostBefore:
		o = 1
	case err != nil:
		o = 2
	}
	if m := h.t.m; m != nil {
		m.held.Add(ctx, -1, m.base.Add...)
		m.hold.Record(ctx, tel.Since(h.start), m.release[o].Record...)
	}
	if span != nil {
		tel.EndSpan(span, err)
		h.span.SetAttributes(tel.Outcome.String([]string{"released", "lost", "error"}[o]))
		tel.EndSpan(h.span, err)
	}
}

// lost records the loss of the hold for reason.
func (h *holdTel) lost(reason lossReason) {
	if h == nil {
		return
	}
	if m := h.t.m; m != nil {
		m.lost.Add(context.Background(), 1, m.loss[reason].Add...)
	}
	if h.span != nil {
		h.span.AddEvent("lease lost", trace.WithAttributes(tel.Reason.String([]string{"", "expired", "renewal", "release"}[reason])))
	}
}

// renewed records the outcome of a renewal of the hold.
func (h *holdTel) renewed(ok bool, err error) {
	if h == nil {
		return
	}
	o := 0
	switch {
	case errors.Is(err, ErrLockLost) || (err == nil && !ok):
		o = 1
	case err != nil:
		o = 2
	}
	if m := h.t.m; m != nil {
		m.renewals.Add(context.Background(), 1, m.renew[o].Add...)
	}
	if h.span != nil {
		h.span.AddEvent("renewal", trace.WithAttributes(tel.Outcome.String([]string{"renewed", "lost", "error"}[o])))
	}
}

// retried counts a transient error of op that is retried.
func (t *telemetry) retried(op retryOp) {
	if t == nil || t.m == nil {
		return
	}
	t.m.retries.Add(context.Background(), 1, t.m.retry[op].Add...)
}

// handedOff counts an acquisition of a lease handed over by a release.
func (t *telemetry) handedOff(ctx context.Context) {
	if t == nil || t.m == nil {
		return
	}
	t.m.handoffs.Add(ctx, 1, t.m.base.Add...)
}

package grouphandler

import (
	"context"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockreg/lockreg/groupstore"
	tel "github.com/lockreg/lockreg/internal/telemetry"
	"github.com/lockreg/lockreg/registry"
)

// handlerTel is a Core's instruments and tracer, nil when the handler
// reports nothing.
type handlerTel struct {
	tracer  trace.Tracer // nil without a tracer provider
	m       *handlerMetrics
	kind    string
	attrs   []attribute.KeyValue // the handler and its name
	handled [2]tel.Attrs         // ok, error
	added   [2]tel.Attrs         // added, duplicate
	base    tel.Attrs
}

type handlerMetrics struct {
	handle    metric.Float64Histogram
	added     metric.Int64Counter
	discarded metric.Int64Counter
	completed metric.Int64Counter
	emptied   metric.Int64Counter
	expired   metric.Int64Counter
	store     metric.Float64Histogram
}

// providers returns the meter and tracer providers of s: its own, or those
// of its Locks if that is a *registry.Registry.
func (s Settings) providers() (metric.MeterProvider, trace.TracerProvider) {
	mp, tp := s.MeterProvider, s.TracerProvider
	if r, ok := s.Locks.(*registry.Registry); ok {
		if mp == nil {
			mp = r.MeterProvider()
		}
		if tp == nil {
			tp = r.TracerProvider()
		}
	}
	return mp, tp
}

// newTelemetry returns the telemetry of a handler of kind name, nil if it
// reports nothing. Instruments are made once, here.
func newTelemetry(name string, s Settings) *handlerTel {
	mp, tp := s.providers()
	scope := "github.com/lockreg/lockreg/" + name
	meter, tracer := tel.Meter(mp, scope), tel.Tracer(tp, scope)
	if meter == nil && tracer == nil {
		return nil
	}
	t := &handlerTel{tracer: tracer, kind: name}
	t.setName("")
	if meter == nil {
		return t
	}
	in := &tel.Instruments{M: meter}
	t.m = &handlerMetrics{
		handle: in.Seconds("lockreg.handler.message.duration",
			"Time a handler took for a message, its group lock included, by outcome: ok or error (the message is redelivered).", tel.DurationBuckets),
		added: in.Counter("lockreg.handler.messages.added", "{message}",
			"Messages stored in their group, by outcome: added, or duplicate (a redelivery, stored already)."),
		discarded: in.Counter("lockreg.handler.messages.discarded", "{message}",
			"Messages discarded (sent to the discard topic or logged), by reason."),
		completed: in.Counter("lockreg.handler.groups.completed", "{group}",
			"Groups completed with an output: released by the strategy, or on expiry as a partial result."),
		emptied: in.Counter("lockreg.handler.groups.discarded", "{group}",
			"Groups completed without an output: expired, their messages discarded."),
		expired: in.Counter("lockreg.handler.groups.expired", "{group}",
			"Due groups the timeout runner expired (released, discarded or removed)."),
		store: in.Seconds("lockreg.handler.store.duration",
			"Duration of the group store's calls, by operation and outcome (ok or error).", tel.DurationBuckets),
	}
	t.setName("")
	return t
}

// setName sets the handler name of the attributes; AddHandler calls it
// before the handler runs.
func (t *handlerTel) setName(handlerName string) {
	if t == nil {
		return
	}
	t.attrs = []attribute.KeyValue{tel.Handler.String(t.kind)}
	if handlerName != "" {
		t.attrs = append(t.attrs, tel.Name.String(handlerName))
	}
	t.handled = [2]tel.Attrs{t.with(tel.Outcome.String("ok")), t.with(tel.Outcome.String("error"))}
	t.added = [2]tel.Attrs{t.with(tel.Outcome.String("added")), t.with(tel.Outcome.String("duplicate"))}
	t.base = t.with()
}

func (t *handlerTel) with(kv ...attribute.KeyValue) tel.Attrs {
	return tel.NewAttrs(append(kv, t.attrs...)...)
}

// Begin starts the handling of msg: it returns the context to handle it
// with, which carries the handler's span (a child of the span of msg's
// context) when tracing, and end, to call with Handle's result.
func (c *Core) Begin(msg *message.Message) (ctx context.Context, end func(error)) {
	ctx, t := msg.Context(), c.tel
	if t == nil {
		return ctx, func(error) {}
	}
	start := time.Now()
	var span trace.Span
	if t.tracer != nil {
		ctx, span = t.tracer.Start(ctx, "lockreg."+t.kind+".handle", trace.WithSpanKind(trace.SpanKindConsumer),
			trace.WithAttributes(t.attrs...), trace.WithAttributes(attribute.String("messaging.message.id", msg.UUID)))
	}
	return ctx, func(err error) {
		if t.m != nil {
			o := 0
			if err != nil {
				o = 1
			}
			t.m.handle.Record(ctx, tel.Since(start), t.handled[o].Record...)
		}
		if span != nil {
			tel.EndSpan(span, err)
		}
	}
}

// groupSpan sets the group key on the span of ctx.
func groupSpan(ctx context.Context, key string) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(tel.Group.String(key))
	}
}

// startExpiry starts the span of the expiry of the due group key.
func (t *handlerTel) startExpiry(ctx context.Context, key string) (context.Context, trace.Span) {
	if t == nil || t.tracer == nil {
		return ctx, nil
	}
	return t.tracer.Start(ctx, "lockreg."+t.kind+".expire", trace.WithAttributes(t.attrs...),
		trace.WithAttributes(tel.Group.String(key)))
}

// metrics returns the instruments, nil if there are none.
func (t *handlerTel) metrics() *handlerMetrics {
	if t == nil {
		return nil
	}
	return t.m
}

// addedMessage counts the outcome of a store Add.
func (t *handlerTel) addedMessage(o groupstore.Outcome) {
	if m := t.metrics(); m != nil && (o == groupstore.Added || o == groupstore.Duplicate) {
		m.added.Add(context.Background(), 1, t.added[min(int(o-groupstore.Added), 1)].Add...)
	}
}

// discardedMessages counts msgs discarded, by the reasons set under
// reasonKey: the part before the first colon, which names the reason
// without the details.
func (t *handlerTel) discardedMessages(msgs []*message.Message, reasonKey string) {
	m := t.metrics()
	if m == nil {
		return
	}
	for _, msg := range msgs {
		reason, _, _ := strings.Cut(msg.Metadata.Get(reasonKey), ":")
		m.discarded.Add(context.Background(), 1, metric.WithAttributeSet(attribute.NewSet(
			append([]attribute.KeyValue{tel.Reason.String(reason)}, t.attrs...)...)))
	}
}

// completedGroup counts a group completed, with an output or without.
func (t *handlerTel) completedGroup(withOutput bool) {
	m := t.metrics()
	switch {
	case m == nil:
	case withOutput:
		m.completed.Add(context.Background(), 1, t.base.Add...)
	default:
		m.emptied.Add(context.Background(), 1, t.base.Add...)
	}
}

// expiredGroup counts a group the runner expired.
func (t *handlerTel) expiredGroup() {
	if m := t.metrics(); m != nil {
		m.expired.Add(context.Background(), 1, t.base.Add...)
	}
}

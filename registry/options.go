package registry

import (
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// Default settings, as in Spring Integration's JdbcLockRegistry.
const (
	DefaultTTL              = 10 * time.Second
	DefaultIdleBetweenTries = 100 * time.Millisecond
	DefaultCacheCapacity    = 100_000
)

// An Option configures a [Registry]. [New] checks the options and returns
// an error wrapping [ErrInvalidOption] for an invalid one.
type Option func(*options)

type options struct {
	ttl           time.Duration
	idle          time.Duration
	cacheCapacity int
	errorHandler  func(key string, err error) // nil: log
	handlerSet    bool
	keepAlive     bool
	meters        metric.MeterProvider
	tracers       trace.TracerProvider
	logger        *slog.Logger
}

func defaultOptions() options {
	return options{
		ttl:           DefaultTTL,
		idle:          DefaultIdleBetweenTries,
		cacheCapacity: DefaultCacheCapacity,
	}
}

func (o *options) validate() error {
	switch {
	case o.ttl <= 0:
		return fmt.Errorf("registry: WithTTL(%v): %w: %w", o.ttl, ErrInvalidOption, ErrInvalidTTL)
	case o.idle <= 0:
		return fmt.Errorf("registry: WithIdleBetweenTries(%v): %w: must be positive", o.idle, ErrInvalidOption)
	case o.cacheCapacity <= 0:
		return fmt.Errorf("registry: WithCacheCapacity(%d): %w: must be positive", o.cacheCapacity, ErrInvalidOption)
	case o.handlerSet && o.errorHandler == nil:
		return fmt.Errorf("registry: WithErrorHandler(nil): %w: the handler must not be nil", ErrInvalidOption)
	}
	return nil
}

// WithTTL sets how long a lease lasts unless renewed (default 10 s). A holder
// that stalls longer than the TTL loses the lock to the next process that
// asks. It must be positive.
func WithTTL(d time.Duration) Option { return func(o *options) { o.ttl = d } }

// WithIdleBetweenTries sets how long a waiter sleeps after finding the lease
// held by another process before it asks the repository again (default
// 100 ms). It bounds the cross-process hand-off latency and the load that
// waiting puts on the database: one statement per key per process per
// interval. It must be positive.
func WithIdleBetweenTries(d time.Duration) Option { return func(o *options) { o.idle = d } }

// WithCacheCapacity sets how many idle lock objects the registry keeps
// (default 100 000). Locks that are held or waited on are never evicted and
// are not counted. It must be positive.
func WithCacheCapacity(n int) Option { return func(o *options) { o.cacheCapacity = n } }

// WithErrorHandler sets the function that receives errors that have no
// caller to return to: a lease found lost by [Lock.Unlock], transient
// repository errors that the registry retries, and failed clean-ups. It is
// called synchronously and must not block. The default logs them to the
// logger of [WithLogger] at error level, transient errors that are retried
// at most once per 10 s (with a count of the ones held back).
func WithErrorHandler(f func(key string, err error)) Option {
	return func(o *options) { o.errorHandler, o.handlerSet = f, true }
}

// WithKeepAlive makes the registry renew every held lease in the
// background, a third of its TTL after it was taken or last renewed, so
// that work may outlast the TTL. Renewal failures are retried and reported;
// [Lock.Done] closes when the lease is found lost or could not be renewed
// before the safety margin. Renewals stop when the registry is closed. Each
// renewal is one repository call per held lock.
func WithKeepAlive() Option { return func(o *options) { o.keepAlive = true } }

// WithLogger sets the logger of the errors that have no caller, when no
// [WithErrorHandler] takes them (default: [slog.Default] as it is when
// they occur). Records have the fields key, region, client and backend,
// as the repository describes itself ([Describer]), and err. Packages
// built on a registry (tasklock, leader, lockmw, the handlers) log to it
// too unless given a logger of their own.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithMeterProvider makes the registry record its metrics with mp (the
// instruments are listed in the package documentation). Without it, or
// with OpenTelemetry's no-op provider, the registry records nothing and
// its hooks cost a nil check; pass otel.GetMeterProvider() to use the
// global provider. Instruments are made once, by New; a measurement
// allocates nothing for its attributes.
func WithMeterProvider(mp metric.MeterProvider) Option { return func(o *options) { o.meters = mp } }

// WithTracerProvider makes the registry trace lock calls with tp: a span
// "lockreg.acquire" per lock call (its wait included), "lockreg.hold" from
// the acquisition to the unlock, with events for renewals and a lost
// lease, and "lockreg.release" within it. Without it, or with a no-op
// provider, it traces nothing; pass otel.GetTracerProvider() for the
// global provider. Spans descend from the span of the context passed to
// the lock call.
func WithTracerProvider(tp trace.TracerProvider) Option { return func(o *options) { o.tracers = tp } }

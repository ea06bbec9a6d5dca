package lockmw

import (
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/lockreg/lockreg/registry"
)

// Defaults of the options.
const (
	// DefaultTTL is the lease of each hold: the registry's default TTL.
	DefaultTTL = registry.DefaultTTL
	// DefaultLockTimeout bounds the wait for a key's lock. It is the
	// aggregator's, and well under the ack deadlines of common
	// subscribers (watermill-sql and SQS 30 s), leaving room for the
	// handler and for a few attempts of Watermill's Retry middleware.
	DefaultLockTimeout = 5 * time.Second
	// DefaultPrefix is prepended to each key to form its lock key, so that
	// the middleware's locks do not collide with other users of the
	// registry (the aggregator's prefix is "aggregator:").
	DefaultPrefix = "lockmw:"
)

// MissingKey says what [PerKey] does with a message for which the key
// function returns an empty key and no error.
type MissingKey int

const (
	// FailWithoutKey returns an error wrapping [ErrNoKey] without running
	// the handler, so that the message is nacked (the default).
	FailWithoutKey MissingKey = iota
	// RunWithoutLock runs the handler without a lock; [Token] reports
	// false in its context. Use it only where messages without a key need
	// no exclusion.
	RunWithoutLock
)

// An Option configures [PerKey]. PerKey checks the options and returns an
// error wrapping [ErrInvalidOption] for an invalid one.
type Option func(*options)

type options struct {
	ttl     time.Duration
	timeout time.Duration
	prefix  string
	missing MissingKey
	logger  watermill.LoggerAdapter
}

func defaultOptions() options {
	return options{ttl: DefaultTTL, timeout: DefaultLockTimeout, prefix: DefaultPrefix, missing: FailWithoutKey}
}

func (o *options) validate() error {
	switch {
	case o.ttl <= 0:
		return fmt.Errorf("%w: WithTTL(%v): must be positive", ErrInvalidOption, o.ttl)
	case o.timeout <= 0:
		return fmt.Errorf("%w: WithLockTimeout(%v): must be positive", ErrInvalidOption, o.timeout)
	case o.missing != FailWithoutKey && o.missing != RunWithoutLock:
		return fmt.Errorf("%w: WithMissingKey(%d): unknown policy", ErrInvalidOption, o.missing)
	}
	return nil
}

// WithTTL sets the lease each hold takes (default [DefaultTTL]); the
// middleware renews it every third of d while the handler runs, so d
// bounds how long a key stays blocked after its holder dies, not how long
// a handler may run. For the middleware's holds it replaces the
// registry's TTL (registry.WithTTL), because the middleware renews by it.
// It must be positive.
func WithTTL(d time.Duration) Option { return func(o *options) { o.ttl = d } }

// WithLockTimeout sets how long a message waits for its key's lock
// (default [DefaultLockTimeout]) before the middleware gives up with
// [ErrLockTimeout]. Keep it, times the attempts of a Retry middleware
// outside, plus the handler's time, under the subscriber's ack deadline.
// It must be positive.
func WithLockTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// WithPrefix sets the string prepended to each key to form its lock key
// (default [DefaultPrefix]). Two middlewares, or a middleware and another
// user of the registry, that must not share locks need different
// prefixes. The lock table's region is the repository's
// (jdbc.WithRegion). Any string, the empty one included, is valid.
func WithPrefix(p string) Option { return func(o *options) { o.prefix = p } }

// WithMissingKey sets what happens to a message without a key (default
// [FailWithoutKey]).
func WithMissingKey(m MissingKey) Option { return func(o *options) { o.missing = m } }

// WithLogger sets the logger of the errors that have no caller: a failed
// unlock that leaves the lease to expire on its own, and renewals that
// failed without losing the lease. Default: the registry's logger
// (registry.WithLogger) if the LockRegistry is a *registry.Registry,
// otherwise slog's default logger; a nil logger restores the default.
func WithLogger(l watermill.LoggerAdapter) Option { return func(o *options) { o.logger = l } }

package leader

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/lockreg/lockreg/registry"
)

// DefaultBusyWait is how long a candidate waits, by default, after a term
// ended or an attempt at leadership failed, before it competes again.
const DefaultBusyWait = time.Second

// An Option configures a [Candidate]. [New] checks the options and returns
// an error wrapping [ErrInvalidOption] for an invalid one.
type Option func(*options)

type options struct {
	ttl          time.Duration
	busyWait     time.Duration
	onGranted    func(*Term)
	onRevoked    func(*Term)
	errorHandler func(error) // nil: log
	handlerSet   bool
	logger       *slog.Logger
}

func defaultOptions() options {
	return options{ttl: registry.DefaultTTL, busyWait: DefaultBusyWait}
}

func (o *options) validate() error {
	switch {
	case o.ttl <= 0:
		return fmt.Errorf("leader: WithTTL(%v): %w: %w", o.ttl, ErrInvalidOption, registry.ErrInvalidTTL)
	case o.busyWait <= 0:
		return fmt.Errorf("leader: WithBusyWait(%v): %w: must be positive", o.busyWait, ErrInvalidOption)
	case o.handlerSet && o.errorHandler == nil:
		return fmt.Errorf("leader: WithErrorHandler(nil): %w: the handler must not be nil", ErrInvalidOption)
	}
	return nil
}

// WithTTL sets the lease of the leadership (default [registry.DefaultTTL],
// 10 s), whatever the registry's own TTL: if the leader dies or is cut off,
// another candidate leads about this long after the last renewal. The
// candidate renews the lease every third of it, one repository call each.
// It must be positive.
func WithTTL(d time.Duration) Option { return func(o *options) { o.ttl = d } }

// WithBusyWait sets how long the candidate waits before it competes again
// after a term ended (so that a candidate that yields lets another lead)
// and after an attempt at leadership failed with an error other than the
// lease being held elsewhere (default [DefaultBusyWait], 1 s): Spring's
// busyWaitMillis. While the lease is held elsewhere, the candidate waits in
// the registry instead, which polls at its idle interval
// ([registry.WithIdleBetweenTries]) and is woken at once by a repository
// that announces releases (package jdbc on PostgreSQL with a listener). It
// must be positive.
func WithBusyWait(d time.Duration) Option { return func(o *options) { o.busyWait = d } }

// OnGranted sets a function called with each new term, in a goroutine of
// its own, as soon as the candidate leads. It may return at once, having
// started work that stops when the term's context is done, or run the
// leader's work itself until then. The lease is released only after it
// has returned (see [OnRevoked]).
func OnGranted(f func(*Term)) Option { return func(o *options) { o.onGranted = f } }

// OnRevoked sets a function called when a term has ended: after its
// context is done and the function set by [OnGranted] has returned, and
// before the lease is released, so that it may wait for the leader's work
// to stop: no other candidate is granted the leadership before it returns
// or the lease expires, whichever comes first (the lease is no longer
// renewed). It runs on the candidate's goroutine, which does not compete
// meanwhile.
func OnRevoked(f func(*Term)) Option { return func(o *options) { o.onRevoked = f } }

// WithErrorHandler sets the function that receives the errors of the
// candidate's attempts, renewals and releases, which it retries or gives
// up on by itself. It is called synchronously and must not block. The
// default logs them to the logger of [WithLogger], the failed attempts and
// renewals that the candidate retries at most once per 10 s (with a count
// of the ones held back). Transient errors that the registry retries go to
// the registry's error handler.
func WithErrorHandler(f func(error)) Option {
	return func(o *options) { o.errorHandler, o.handlerSet = f, true }
}

// WithLogger sets the logger of the candidate's errors when no
// [WithErrorHandler] takes them. Records have the field key, the role.
// Default: the registry's logger (registry.WithLogger) if the
// LockRegistry is a *registry.Registry, otherwise slog.Default() as it is
// when they occur.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

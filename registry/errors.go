package registry

import (
	"errors"
	"fmt"
)

var (
	// ErrLockLost reports that a lease expired and is no longer this
	// holder's: another client may have taken it, so the data it guarded may
	// have been changed by someone else.
	ErrLockLost = errors.New("registry: lock lost")

	// ErrNotHeld reports an unlock or renewal of a lock that this registry
	// does not hold.
	ErrNotHeld = errors.New("registry: lock not held")

	// ErrClosed reports use of a closed Registry or Repository.
	ErrClosed = errors.New("registry: closed")

	// ErrTransient marks repository errors that may succeed when retried.
	// Repositories wrap such errors so that errors.Is(err, ErrTransient)
	// holds; the registry retries them with capped, jittered backoff.
	ErrTransient = errors.New("registry: transient error")

	// ErrInvalidTTL reports a lease duration that is not positive.
	ErrInvalidTTL = errors.New("registry: ttl must be positive")

	// ErrListenerDown reports, from a [Checker]'s Check, that the
	// repository's listener for released locks has lost its connection and
	// is reconnecting. Leases still work: waiters poll at their idle
	// interval meanwhile, so hand-off takes longer. A readiness probe that
	// should only fail when locks cannot be taken ignores it with
	// errors.Is.
	ErrListenerDown = errors.New("registry: not listening for released locks")

	// ErrInvalidOption reports an invalid argument to [New] or
	// [NewLocal]: a nil repository or an option with an invalid value. The
	// returned error names the option.
	ErrInvalidOption = errors.New("registry: invalid option")
)

// Transient wraps err so that errors.Is(err, ErrTransient) reports true while
// errors.Is and errors.As still see err. It returns nil for a nil err.
func Transient(err error) error {
	if err == nil {
		return nil
	}
	return transientError{err}
}

type transientError struct{ err error }

func (e transientError) Error() string { return e.err.Error() }
func (e transientError) Unwrap() error { return e.err }
func (e transientError) Is(target error) bool {
	return target == ErrTransient
}

// errGivenUp reports a renewal of a hold whose Done channel has closed.
var errGivenUp = fmt.Errorf("%w: Done closed before the renewal took effect, so the hold is given up; unlock and lock again", ErrLockLost)

// wrap names the operation and the key in err, which it returns nil for a
// nil err.
func wrap(op, key string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("registry: %s %q: %w", op, shortKey(key), err)
}

// shortKey keeps errors about huge keys readable.
func shortKey(key string) string {
	const max = 128
	if len(key) <= max {
		return key
	}
	return fmt.Sprintf("%s...(%d bytes)", key[:max], len(key))
}

package lockmw

import "errors"

var (
	// ErrNoKey reports a message the key function gave no key for (an
	// empty key, with the default FailWithoutKey), or whose key function
	// failed; the error then wraps the function's error too. The handler
	// did not run and the message is nacked: route such messages to a
	// poison queue with Watermill's PoisonQueueWithFilter.
	ErrNoKey = errors.New("lockmw: message without key")

	// ErrLockTimeout reports that the key's lock was not acquired within
	// the lock timeout ([WithLockTimeout]). The handler did not run and the
	// message is nacked, so Watermill's Retry middleware, or the
	// subscriber's redelivery, tries it again.
	ErrLockTimeout = errors.New("lockmw: lock timeout")

	// ErrLockLost reports that the hold of the key's lock ended, or may
	// have ended, before the handler returned: its lease was not renewed in
	// time or was found lost, or the unlock found it lost. The message is
	// nacked even if the handler returned nil, because the work may have
	// overlapped another holder's.
	ErrLockLost = errors.New("lockmw: lock lost")

	// ErrInvalidOption reports an invalid argument to [PerKey]; the
	// returned error wraps it and names the argument.
	ErrInvalidOption = errors.New("lockmw: invalid option")
)

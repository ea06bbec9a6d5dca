package aggregator

import "errors"

var (
	// ErrInvalidConfig reports an invalid [Config]; the returned error wraps
	// it and names the field.
	ErrInvalidConfig = errors.New("aggregator: invalid config")

	// ErrNoCorrelationKey reports a message whose correlation key is empty.
	// Handle returns it, so the router nacks the message; route such
	// messages to a poison queue with Watermill's PoisonQueueWithFilter
	// middleware.
	ErrNoCorrelationKey = errors.New("aggregator: message without correlation key")

	// ErrNoMessageID reports a message whose id (Config.MessageID) is empty.
	ErrNoMessageID = errors.New("aggregator: message without id")

	// ErrLockTimeout reports that the group lock was not acquired within
	// Config.LockTimeout; the message is nacked and redelivered.
	ErrLockTimeout = errors.New("aggregator: group lock timeout")

	// ErrLockLost reports that the group lock's hold ended, or may have
	// ended, before the handler was done with the group: nothing more is
	// published or recorded, and the message is nacked and redelivered.
	ErrLockLost = errors.New("aggregator: group lock lost")

	// ErrNoSequenceSize is the error of the log entry, at error level, that
	// reports a message without a valid positive SequenceSizeKey under
	// [ReleaseOnSequenceSize]; Handle keeps and acks such a message and does
	// not return it.
	ErrNoSequenceSize = errors.New("aggregator: message without a valid sequence size")
)

package resequencer

import (
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockreg/lockreg/groupstore"
	"github.com/lockreg/lockreg/internal/grouphandler"
	"github.com/lockreg/lockreg/registry"
)

// Metadata keys the resequencer reads and writes.
const (
	// CorrelationIDKey is the default correlation metadata key, the one of
	// Watermill's CorrelationID middleware
	// (middleware.CorrelationIDMetadataKey).
	CorrelationIDKey = "correlation_id"
	// SequenceNumberKey is the default metadata key of a message's 1-based
	// position in its group.
	SequenceNumberKey = "sequence_number"
	// SequenceSizeKey is the default metadata key of the number of messages
	// in a message's group.
	SequenceSizeKey = "sequence_size"
	// DiscardReasonKey is set on discarded messages. Its values:
	//
	//   - "late": the sequence number is at or below the group's last
	//     released one, or the group is complete;
	//   - "duplicate": the group holds another message with the same
	//     sequence number (the one that arrived first is kept);
	//   - "expired": the group timed out and SendPartialResultOnExpiry is
	//     off;
	//   - "invalid: " followed by what is wrong with the sequence metadata
	//     (missing, not a number, below 1, beyond the sequence size, or a
	//     sequence size that differs from the group's).
	DiscardReasonKey = "resequencer_discard_reason"
)

// Discard reasons, the values of DiscardReasonKey other than "invalid: ...".
const (
	reasonLate      = "late"
	reasonDuplicate = "duplicate"
	reasonExpired   = "expired"
	reasonInvalid   = "invalid: "
)

// Defaults of [Config].
const (
	DefaultLockTimeout  = 5 * time.Second
	DefaultPollInterval = time.Second
	DefaultLockPrefix   = "resequencer:"
)

// Config configures a [Resequencer]. OutputTopic is required, and Publisher
// unless Store is a [groupstore.Outbox]; every other field has a default,
// applied by [New].
type Config struct {
	// Publisher and OutputTopic receive the released messages, one Publish
	// call per released run, in sequence order. The resequencer's order
	// guarantee reaches consumers only if the topic keeps the order of
	// successive Publish calls for a group (one Kafka partition per key, a
	// watermill-sql topic, a GoChannel with BlockPublishUntilSubscriberAck).
	// When Store is a [groupstore.Outbox], releases go through it instead,
	// in the transaction that records them, and Publisher is only the
	// default DiscardPublisher.
	Publisher   message.Publisher
	OutputTopic string

	// Store keeps the groups. Default: a new [groupstore.Memory], which
	// keeps them in this process only and loses them when it ends: a
	// single-instance resequencer. Instances that resequence together share a
	// store (and region) and a lock registry. Without a Store or Locks the
	// resequencer says so in one info log line when it starts (AddHandler,
	// or else its first Handle or RunTimeouts).
	Store groupstore.Store
	// Locks serializes the handling of each group across goroutines and,
	// when backed by a shared repository, across instances, with a lease
	// per group (two commits per message). Default: none where Store
	// locks groups itself (a [groupstore.Locker], as sqlstore's Store and
	// Outbox are): each group step then runs in one transaction of the
	// store under the group row's lock, across instances too, and
	// LockTimeout does not apply (a row lock lasts a transaction, and a
	// dead holder's ends with its connection; a step holds one of the
	// store's connections while it publishes, so a publisher on the same
	// pool, as watermill-sql's, needs one more per message in flight).
	// Otherwise
	// [registry.NewLocal], whose locks hold in this process only, so
	// instances sharing a Store do not take turns on a group. The
	// resequencer does not close it.
	Locks registry.LockRegistry
	// LockPrefix is prepended to the correlation key to form the group's
	// lock key. Default: DefaultLockPrefix.
	LockPrefix string
	// LockTimeout bounds the wait for a group lock. A handler that does not
	// get the lock in time returns an error wrapping ErrLockTimeout, so the
	// message is nacked and redelivered. Keep it well under the
	// subscriber's ack deadline. Default: DefaultLockTimeout.
	LockTimeout time.Duration

	// Correlation returns a message's correlation key; "" makes Handle fail
	// with ErrNoCorrelationKey. Default: the "correlation_id" metadata of
	// Watermill's CorrelationID middleware.
	Correlation func(*message.Message) string
	// MessageID returns the identity by which redeliveries are recognised;
	// "" makes Handle fail with ErrNoMessageID. Default: the message UUID.
	MessageID func(*message.Message) string

	// SequenceNumberKey and SequenceSizeKey name the metadata holding a
	// message's 1-based sequence number and its group's size, both decimal.
	// Defaults: SequenceNumberKey and SequenceSizeKey.
	SequenceNumberKey string
	SequenceSizeKey   string

	// ReleasePartialSequences releases each contiguous run that follows the
	// last released sequence number as soon as it is complete. By default
	// a group is released only whole, once it holds every number from 1 to
	// its sequence size. With partial releases the sequence size may be
	// missing: the sequence is then unbounded and its group never completes
	// by itself (only by GroupTimeout).
	ReleasePartialSequences bool

	// GroupTimeout, when positive, expires a group GroupTimeout after its
	// last message was added: its messages are released in order, skipping
	// gaps, if SendPartialResultOnExpiry, and otherwise discarded. The
	// group is then kept complete, so that later messages are discarded as
	// late, or removed if ExpireGroupsOnTimeout.
	GroupTimeout time.Duration
	// GroupTimeoutFunc, optional, is the group timeout as a function of
	// the group: Spring's groupTimeoutExpression. It is called under the
	// group lock after every message that is added (or redelivered to an
	// open group) and does not complete its group, with the group as it is
	// once that message's releases and discards are done (Key, ID, Size
	// of the messages still held, LastReleasedSequence, Created; no
	// Messages) and the message. A positive result makes the group due that
	// long from the store's now, replacing the due time an earlier message
	// set; zero clears it, so the group has no timeout (Spring's null); a
	// negative result expires the group at once, in Handle, as the timeout
	// runner would (Spring's zero or less). Spring evaluates its expression
	// only when the message releases nothing; here it is also evaluated
	// after a partial release, so that messages held behind a gap keep a
	// timeout (Spring cancels the timer on arrival and sets no new one after
	// a release). It costs a store Update per message that releases
	// nothing, and nothing more for one that does. Mutually exclusive with
	// GroupTimeout.
	GroupTimeoutFunc func(g groupstore.Group, latest *message.Message) time.Duration
	// SendPartialResultOnExpiry releases the messages of an expired group
	// instead of discarding them.
	SendPartialResultOnExpiry bool
	// ExpireGroupsOnTimeout removes an expired group instead of keeping it
	// complete, so that a later message with the same key starts a new
	// group (with new output UUIDs).
	ExpireGroupsOnTimeout bool
	// ExpireGroupsOnCompletion removes a group as soon as its whole
	// sequence is released. By default the completed group is kept, without
	// its messages, so that late messages are discarded and redeliveries
	// recognised; with this option a redelivery starts a new group.
	ExpireGroupsOnCompletion bool
	// MinimumTimeoutForEmptyGroups, when positive, removes a kept complete
	// group that long after its completion. Zero keeps it until removed by
	// other means.
	MinimumTimeoutForEmptyGroups time.Duration
	// PollInterval is how often the timeout runner asks the store for due
	// groups. Default: DefaultPollInterval.
	PollInterval time.Duration

	// DiscardPublisher and DiscardTopic receive late, duplicate, invalid
	// and expired messages, with DiscardReasonKey set. Without a topic they
	// are logged at info level; a topic without a publisher uses Publisher.
	DiscardPublisher message.Publisher
	DiscardTopic     string

	// Logger logs discards, lost locks, runner errors and the in-memory
	// defaults. Default: the
	// router's logger when added with [Resequencer.AddHandler], otherwise
	// the logger of Locks if it is a *registry.Registry
	// (registry.WithLogger), or slog's default logger.
	Logger watermill.LoggerAdapter

	// MeterProvider records the handler's metrics (messages added and
	// discarded, groups completed, discarded and expired, store call and
	// message durations; docs/observability.md lists them) and
	// TracerProvider traces each message's handling (a span
	// "lockreg.resequencer.handle", a child of the span of the message's context,
	// which the group lock's spans descend from) and each expiry.
	// Optional: those of Locks if it is a *registry.Registry (see
	// registry.WithMeterProvider), otherwise none: the handler records
	// nothing.
	MeterProvider  metric.MeterProvider
	TracerProvider trace.TracerProvider
}

// kind tells the shared group-handler machinery what it works for.
var kind = grouphandler.Kind{
	Name:             "resequencer",
	DiscardReasonKey: DiscardReasonKey,
	Defaults: grouphandler.Defaults{LockPrefix: DefaultLockPrefix, LockTimeout: DefaultLockTimeout,
		PollInterval: DefaultPollInterval, CorrelationIDKey: CorrelationIDKey},
	Errors: grouphandler.Errors{NoCorrelationKey: ErrNoCorrelationKey, NoMessageID: ErrNoMessageID,
		LockTimeout: ErrLockTimeout, LockLost: ErrLockLost},
}

// settings returns the settings the resequencer shares with the
// aggregator, for [grouphandler.New], which applies their defaults and is
// their one holder from then on. TestSettingsCopyEverySharedField checks
// that every one is copied.
func (c Config) settings() grouphandler.Settings {
	return grouphandler.Settings{
		Publisher: c.Publisher, OutputTopic: c.OutputTopic,
		Store: c.Store, Locks: c.Locks, LockPrefix: c.LockPrefix, LockTimeout: c.LockTimeout,
		Correlation: c.Correlation, MessageID: c.MessageID,
		GroupTimeout: c.GroupTimeout, GroupTimeoutFunc: c.GroupTimeoutFunc,
		MinimumTimeoutForEmptyGroups: c.MinimumTimeoutForEmptyGroups,
		PollInterval:                 c.PollInterval,
		DiscardPublisher:             c.DiscardPublisher, DiscardTopic: c.DiscardTopic,
		Logger: c.Logger, MeterProvider: c.MeterProvider, TracerProvider: c.TracerProvider,
	}
}

// rules are the resequencer's own settings, the fields of its Config that
// are not in [grouphandler.Settings].
type rules struct {
	numberKey, sizeKey string // SequenceNumberKey, SequenceSizeKey
	partial            bool   // ReleasePartialSequences
	partialOnExpiry    bool   // SendPartialResultOnExpiry
	removeOnTimeout    bool   // ExpireGroupsOnTimeout
	removeOnCompletion bool   // ExpireGroupsOnCompletion
	timeoutFunc        bool   // GroupTimeoutFunc != nil: every message reschedules its group
}

// rules returns the resequencer's own settings of c.
func (c Config) rules() rules {
	return rules{numberKey: c.SequenceNumberKey, sizeKey: c.SequenceSizeKey, partial: c.ReleasePartialSequences,
		partialOnExpiry: c.SendPartialResultOnExpiry, removeOnTimeout: c.ExpireGroupsOnTimeout,
		removeOnCompletion: c.ExpireGroupsOnCompletion, timeoutFunc: c.GroupTimeoutFunc != nil}
}

// setDefaults applies the defaults of the resequencer's own fields.
func (c *Config) setDefaults() {
	if c.SequenceNumberKey == "" {
		c.SequenceNumberKey = SequenceNumberKey
	}
	if c.SequenceSizeKey == "" {
		c.SequenceSizeKey = SequenceSizeKey
	}
}

// Validate reports an invalid configuration with an error wrapping
// ErrInvalidConfig. [New] calls it after applying the defaults.
func (c Config) Validate() error {
	p := grouphandler.Problems{Invalid: ErrInvalidConfig}
	s := c.settings()
	s.CheckPublishing(&p)
	if c.SequenceNumberKey != "" && c.SequenceNumberKey == c.SequenceSizeKey {
		p.Add("SequenceNumberKey and SequenceSizeKey must differ, both are %q", c.SequenceNumberKey)
	}
	s.CheckDurations(&p)
	return p.Err()
}

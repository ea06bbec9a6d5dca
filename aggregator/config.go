package aggregator

import (
	"cmp"
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockreg/lockreg/groupstore"
	"github.com/lockreg/lockreg/internal/grouphandler"
	"github.com/lockreg/lockreg/registry"
)

// Metadata keys the aggregator reads and writes.
const (
	// CorrelationIDKey is the default correlation metadata key, the one of
	// Watermill's CorrelationID middleware
	// (middleware.CorrelationIDMetadataKey).
	CorrelationIDKey = "correlation_id"
	// SequenceSizeKey is the metadata key of the number of messages in a
	// message's group, read by [ReleaseOnSequenceSize].
	SequenceSizeKey = "sequence_size"
	// SequenceNumberKey is the metadata key of a message's 1-based position
	// in its group; [DefaultOutput] orders by it when every message has it.
	SequenceNumberKey = "sequence_number"
	// DiscardReasonKey is set on discarded messages: "late" for a message
	// that reached a complete group, "expired" for a message of a group that
	// timed out without a release, and with ReleaseOnSequenceSize
	// "duplicate sequence number" for a second message with a number the
	// group holds and "sequence size mismatch" for a message whose size
	// differs from the group's first message's.
	DiscardReasonKey = "aggregator_discard_reason"
)

// Defaults of [Config].
const (
	DefaultLockTimeout  = 5 * time.Second
	DefaultPollInterval = time.Second
	DefaultLockPrefix   = "aggregator:"
)

// Config configures an [Aggregator]. OutputTopic is required, and Publisher
// unless Store is a [groupstore.Outbox]; every other field has a default,
// applied by [New].
type Config struct {
	// Publisher and OutputTopic receive the aggregated messages. When Store
	// is a [groupstore.Outbox], outputs go through it instead, in the
	// transaction that completes the group, and Publisher is only the
	// default DiscardPublisher.
	Publisher   message.Publisher
	OutputTopic string

	// Store keeps the groups. Default: a new [groupstore.Memory], which
	// keeps them in this process only and loses them when it ends: a
	// single-instance aggregator. Instances that aggregate together share a
	// store (and region) and a lock registry. Without a Store or Locks the
	// aggregator says so in one info log line when it starts (AddHandler,
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
	// aggregator does not close it.
	Locks registry.LockRegistry
	// LockPrefix is prepended to the correlation key to form the group's
	// lock key, so that two aggregators on one registry do not share locks.
	// Default: DefaultLockPrefix.
	LockPrefix string
	// LockTimeout bounds the wait for a group lock. A handler that does not
	// get the lock in time returns an error wrapping ErrLockTimeout, so the
	// message is nacked and redelivered. Keep it well under the
	// subscriber's ack deadline (30 s for watermill-sql). Default:
	// DefaultLockTimeout.
	LockTimeout time.Duration

	// Correlation returns a message's correlation key; "" makes Handle fail
	// with ErrNoCorrelationKey. Default: the "correlation_id" metadata of
	// Watermill's CorrelationID middleware.
	Correlation func(*message.Message) string
	// MessageID returns the identity by which redeliveries are recognised;
	// "" makes Handle fail with ErrNoMessageID. Default: the message UUID.
	MessageID func(*message.Message) string

	// Release decides when a group is complete. Default:
	// ReleaseOnSequenceSize(), Spring Integration's default, which needs
	// SequenceSizeKey metadata on every message; Watermill's own components
	// set none. For messages that carry only a correlation id use
	// ReleaseOnCount, ReleaseWhen, or ReleaseOnTimeout with a GroupTimeout.
	// Under ReleaseOnSequenceSize a message without a valid size is logged
	// at error level (Watermill's LoggerAdapter has no warning level) with
	// an error wrapping ErrNoSequenceSize, once per group and process.
	Release ReleaseStrategy
	// Output builds the aggregated message from a group. The aggregator
	// overwrites the UUID of the message it returns (see [Aggregator]).
	// Default: DefaultOutput.
	Output func(Group) (*message.Message, error)
	// DisablePopSequence, optional, keeps the output's sequence metadata as
	// Output made it. By default (Spring's popSequence, on by default) an
	// output whose sequence.DetailsKey metadata equals that of the group's
	// first message gets the sequence of the level above back: the
	// correlation_id, sequence_number and sequence_size of the message that
	// was split (package [github.com/lockreg/lockreg/sequence]), so that
	// nested split/aggregate works. An output without that stack, or with
	// one Output changed, is left alone; an invalid stack fails the
	// release with an error wrapping sequence.ErrInvalidDetails.
	DisablePopSequence bool

	// GroupTimeout, when positive, expires a group that has not been
	// released GroupTimeout after its last message was added: the release
	// strategy is asked once more, with Group.Expired set; then a partial
	// result is sent if SendPartialResultOnExpiry, and otherwise the
	// messages are discarded. Either way the group then counts as completed.
	GroupTimeout time.Duration
	// GroupTimeoutFunc, optional, is the group timeout as a function of
	// the group: Spring's groupTimeoutExpression. It is called under the
	// group lock after every message that is added (or redelivered to an
	// open group) and does not release its group, with the group as the
	// store left it (Key, ID, Size, Created, Releases, Version; no
	// Messages) and the message; Spring evaluates its expression at the
	// same point. A positive result makes the group due that long from
	// the store's now, replacing the due time an earlier message set; zero
	// clears it, so the group has no timeout (Spring's null); a negative
	// result expires the group at once, in Handle, as the timeout runner
	// would (Spring's zero or less, "completed immediately on the current
	// thread"). Expiry then goes as with GroupTimeout. It costs a store
	// Update per such message (none when the message releases its group).
	// Mutually exclusive with GroupTimeout.
	GroupTimeoutFunc func(g groupstore.Group, latest *message.Message) time.Duration
	// SendPartialResultOnExpiry publishes the messages of an expired group
	// as an output instead of discarding them.
	SendPartialResultOnExpiry bool
	// ExpireGroupsOnCompletion removes a group as soon as it is released, so
	// that a later message with the same key starts a new group. By default
	// the completed group is kept, without its messages, so that late
	// messages are discarded and redeliveries recognised.
	ExpireGroupsOnCompletion bool
	// MinimumTimeoutForEmptyGroups, when positive, removes a kept completed
	// group that long after its completion. Zero keeps it until removed by
	// other means.
	MinimumTimeoutForEmptyGroups time.Duration
	// PollInterval is how often the timeout runner asks the store for due
	// groups. Default: DefaultPollInterval.
	PollInterval time.Duration

	// ReleaseLockBeforeSend, optional (Spring's releaseLockBeforeSend),
	// publishes a release's output after the group lock is released, so
	// that a slow or blocking Publish (a GoChannel that waits for the ack
	// of a downstream handler locking the same key) does not hold the
	// group. Under the lock the release closes the group (one store
	// Update: complete, its messages kept); after the unlock it publishes
	// and records the release with a second Update conditional on the
	// group's version (with an Outbox, both in one transaction). What
	// changes: the release costs one store Update more; a message that
	// arrives while the output is in flight is discarded as late, as after
	// the release; a send that fails, or whose instance dies, leaves the
	// group closed with its messages, and the redelivered input or, after
	// 2×LockTimeout+PollInterval, any instance's timeout runner publishes
	// it again (also after the unlock, with the same output UUID), so the
	// output stays at least once, and two of these finishers may both
	// publish it where under the lock only one holder could. With an
	// Outbox only the finisher whose transaction commits publishes: still
	// exactly once. Discards are still sent under the lock. Not with
	// ExpireGroupsOnCompletion: a message arriving in flight could neither
	// join the released group nor start the next one.
	ReleaseLockBeforeSend bool

	// DiscardPublisher and DiscardTopic receive late messages and the
	// messages of expired groups, with DiscardReasonKey set. Without a
	// topic they are logged at info level; a topic without a publisher uses
	// Publisher.
	DiscardPublisher message.Publisher
	DiscardTopic     string

	// Logger logs discards, lost locks, runner errors, messages the
	// release strategy cannot use and the in-memory defaults. Default: the
	// router's logger when added with [Aggregator.AddHandler], otherwise
	// the logger of Locks if it is a *registry.Registry
	// (registry.WithLogger), or slog's default logger.
	Logger watermill.LoggerAdapter

	// MeterProvider records the handler's metrics (messages added and
	// discarded, groups completed, discarded and expired, store call and
	// message durations; docs/observability.md lists them) and
	// TracerProvider traces each message's handling (a span
	// "lockreg.aggregator.handle", a child of the span of the message's context,
	// which the group lock's spans descend from) and each expiry.
	// Optional: those of Locks if it is a *registry.Registry (see
	// registry.WithMeterProvider), otherwise none: the handler records
	// nothing.
	MeterProvider  metric.MeterProvider
	TracerProvider trace.TracerProvider
}

// kind tells the shared group-handler machinery what it works for.
var kind = grouphandler.Kind{
	Name:             "aggregator",
	DiscardReasonKey: DiscardReasonKey,
	Defaults: grouphandler.Defaults{LockPrefix: DefaultLockPrefix, LockTimeout: DefaultLockTimeout,
		PollInterval: DefaultPollInterval, CorrelationIDKey: CorrelationIDKey},
	Errors: grouphandler.Errors{NoCorrelationKey: ErrNoCorrelationKey, NoMessageID: ErrNoMessageID,
		LockTimeout: ErrLockTimeout, LockLost: ErrLockLost},
}

// settings returns the settings the aggregator shares with the
// resequencer, for [grouphandler.New], which applies their defaults and is
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

// setDefaults applies the defaults of the aggregator's own fields.
func (c *Config) setDefaults() {
	if c.Release.kind == 0 {
		c.Release = ReleaseOnSequenceSize()
	}
	if c.Output == nil {
		c.Output = DefaultOutput
	}
}

// Validate reports an invalid configuration with an error wrapping
// ErrInvalidConfig. [New] calls it after applying the defaults.
func (c Config) Validate() error {
	p := grouphandler.Problems{Invalid: ErrInvalidConfig}
	s := c.settings()
	s.CheckPublishing(&p)
	s.CheckDurations(&p)
	if c.Release.kind == releaseCount && c.Release.n <= 0 {
		p.Add("ReleaseOnCount needs a positive count, not %d", c.Release.n)
	}
	if c.Release.kind == releaseWhen && c.Release.fn == nil {
		p.Add("ReleaseWhen needs a function")
	}
	if c.ReleaseLockBeforeSend && c.ExpireGroupsOnCompletion {
		p.Add("ReleaseLockBeforeSend and ExpireGroupsOnCompletion cannot be combined")
	}
	if c.Release.kind == releaseTimeout && !s.TimeoutConfigured() {
		p.Add("ReleaseOnTimeout needs a positive GroupTimeout or a GroupTimeoutFunc")
	}
	return p.Err()
}

// Group is a message group as the release strategy and the output function
// see it.
type Group struct {
	// Key is the correlation key.
	Key string
	// Messages are the group's messages in arrival order. They are copies:
	// acking them does nothing.
	Messages []*message.Message
	// Expired reports that the group timed out.
	Expired bool
}

const (
	releaseSequence = iota + 1
	releaseCount
	releaseWhen
	releaseTimeout
)

// ReleaseStrategy decides when a group is complete. Make one with
// [ReleaseOnSequenceSize], [ReleaseOnCount], [ReleaseWhen] or
// [ReleaseOnTimeout]; the zero value is ReleaseOnSequenceSize.
type ReleaseStrategy struct {
	kind int
	n    int
	fn   func(Group) bool
}

// ReleaseOnSequenceSize releases a group once it holds as many messages as
// the SequenceSizeKey metadata of its messages says (Spring Integration's
// default). A message without a valid positive size never completes a group
// on arrival, and a group whose first message lacks one is never released
// by it: only a GroupTimeout ends such a group. The aggregator reports such
// a message (see Config.Release) once per group and process: an aggregator
// remembers the last 4096 groups it reported, so a group may be reported
// again by another instance, after a restart, or after that many others. Like Spring's sequence-aware groups it refuses messages that
// do not fit the sequence: when the group is about to be released (or
// expires), a message whose SequenceNumberKey an earlier message has, or
// whose SequenceSizeKey differs from the first message's, is discarded and
// the group waits for the rest. It costs no store reads.
func ReleaseOnSequenceSize() ReleaseStrategy { return ReleaseStrategy{kind: releaseSequence} }

// ReleaseOnCount releases a group once it holds n messages. It costs no
// store reads.
func ReleaseOnCount(n int) ReleaseStrategy { return ReleaseStrategy{kind: releaseCount, n: n} }

// ReleaseWhen releases a group when complete returns true for it. complete
// is called under the group lock after every added message (and on
// timeout, with Group.Expired set), with all the group's messages, which
// costs a read of the whole group from the store each time.
func ReleaseWhen(complete func(Group) bool) ReleaseStrategy {
	return ReleaseStrategy{kind: releaseWhen, fn: complete}
}

// ReleaseOnTimeout releases a group only when its GroupTimeout passes: a
// window of GroupTimeout after the group's last message. Its release is a
// normal output, whatever SendPartialResultOnExpiry says.
func ReleaseOnTimeout() ReleaseStrategy { return ReleaseStrategy{kind: releaseTimeout} }

// needsMessages reports whether the strategy reads the group's messages.
func (r ReleaseStrategy) needsMessages() bool { return r.kind == releaseWhen }

// canRelease decides for a group of size messages; latest is the message
// just added (nil on timeout), g the loaded group if needsMessages or on
// timeout.
func (r ReleaseStrategy) canRelease(size int, latest *message.Message, g *Group) bool {
	switch r.kind {
	case releaseSequence:
		m := latest
		if m == nil && g != nil && len(g.Messages) > 0 {
			m = g.Messages[0]
		}
		if m == nil {
			return false
		}
		n, err := strconv.Atoi(m.Metadata.Get(SequenceSizeKey))
		return err == nil && n > 0 && size >= n
	case releaseCount:
		return size >= r.n
	case releaseWhen:
		return g != nil && r.fn(*g)
	case releaseTimeout:
		return g != nil && g.Expired
	}
	return false
}

// DefaultOutput is the default output function. The payload is a JSON
// array with one element per message: the payload itself when it is valid
// JSON, otherwise the payload's bytes as a base64 JSON string (as
// encoding/json encodes a []byte). The elements are in sequence order when
// every message has a numeric SequenceNumberKey, otherwise in arrival
// order. The metadata are those that all messages share with equal values,
// less SequenceNumberKey and SequenceSizeKey, with "correlation_id" set to
// the group's key.
func DefaultOutput(g Group) (*message.Message, error) {
	msgs := ordered(g.Messages)
	elems := make([]json.RawMessage, len(msgs))
	for i, m := range msgs {
		if json.Valid(m.Payload) {
			elems[i] = json.RawMessage(m.Payload)
			continue
		}
		b, err := json.Marshal([]byte(m.Payload))
		if err != nil {
			return nil, err
		}
		elems[i] = b
	}
	payload, err := json.Marshal(elems)
	if err != nil {
		return nil, err
	}
	out := message.NewMessage("", payload)
	if len(msgs) > 0 {
		common := maps.Clone(msgs[0].Metadata)
		for _, m := range msgs[1:] {
			maps.DeleteFunc(common, func(k, v string) bool {
				w, ok := m.Metadata[k]
				return !ok || w != v
			})
		}
		delete(common, SequenceNumberKey)
		delete(common, SequenceSizeKey)
		maps.Copy(out.Metadata, common)
	}
	out.Metadata.Set(CorrelationIDKey, g.Key)
	return out, nil
}

// ordered returns msgs by SequenceNumberKey if every message has a number,
// otherwise msgs.
func ordered(msgs []*message.Message) []*message.Message {
	nums := make(map[*message.Message]int, len(msgs))
	for _, m := range msgs {
		n, err := strconv.Atoi(m.Metadata.Get(SequenceNumberKey))
		if err != nil {
			return msgs
		}
		nums[m] = n
	}
	out := append([]*message.Message(nil), msgs...)
	slices.SortStableFunc(out, func(a, b *message.Message) int { return cmp.Compare(nums[a], nums[b]) })
	return out
}

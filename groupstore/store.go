package groupstore

import (
	"context"
	"errors"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
)

var (
	// ErrNotFound reports that the group does not exist.
	ErrNotFound = errors.New("groupstore: group not found")

	// ErrConflict reports that the group's version is not the one the caller
	// expected: someone changed the group since the caller read it, which
	// under a group lock means that the lock was lost.
	ErrConflict = errors.New("groupstore: version conflict")
)

// Message is a message kept in a group. Stores copy it: the caller may
// reuse the maps and slices once a call returns, and a Message returned by a
// store is the caller's own.
type Message struct {
	UUID     string // identifies the message within its group; must not be empty
	Metadata map[string]string
	Payload  []byte
}

// Group is a message group as a store returned it.
type Group struct {
	// Key is the correlation key.
	Key string
	// ID identifies this incarnation of the group: a group removed and
	// created again under the same key gets a new ID. It is stable for the
	// life of the group, so it may seed deterministic output message UUIDs.
	ID string
	// Messages are the group's unreleased messages in arrival order. Only
	// Get fills it.
	Messages []Message
	// Size is the number of unreleased messages.
	Size int
	// Complete reports that the group accepts no more messages.
	Complete bool
	// LastReleasedSequence is the caller's bookkeeping for partial releases
	// (the resequencer's last released sequence number); 0 initially.
	LastReleasedSequence int64
	// Releases counts the updates that released messages.
	Releases int64
	// Version increments by one with every change of the group.
	Version int64
	// Due is when the group's timeout falls due, zero for none; Created and
	// Updated are when the group was created and last changed. All three are
	// in UTC by the store's clock. Add leaves Due and Updated zero.
	Due, Created, Updated time.Time
}

// Outcome tells what Add did with a message.
type Outcome int

const (
	// Added: the message was appended to the group, which was created if it
	// did not exist.
	Added Outcome = iota + 1
	// Duplicate: the group holds, or has released, a message with the same
	// UUID; nothing changed.
	Duplicate
	// Rejected: the group is complete and the message is new to it; nothing
	// changed. This is a late message.
	Rejected
)

func (o Outcome) String() string {
	switch o {
	case Added:
		return "added"
	case Duplicate:
		return "duplicate"
	case Rejected:
		return "rejected"
	}
	return "unknown"
}

// Update is a change of a group that [Store.Update] applies atomically. The
// zero Update changes nothing but the version and update time.
type Update struct {
	// IfVersion, when not zero, makes the update fail with ErrConflict
	// unless the group's version equals it.
	IfVersion int64

	// Release drops the listed unreleased messages from the group (their
	// UUIDs stay known to Add). ReleaseAll drops every unreleased message.
	// An update that has either counts as a release (Group.Releases).
	Release    []string
	ReleaseAll bool

	// Complete marks the group complete. A complete group stays complete.
	Complete bool

	// SetLastReleasedSequence sets LastReleasedSequence to the given value.
	SetLastReleasedSequence bool
	LastReleasedSequence    int64

	// Timeout, when positive, sets the due time to the store's now plus
	// Timeout; ClearTimeout removes the due time. Either ends a claim.
	Timeout      time.Duration
	ClearTimeout bool
}

// DueGroup is a group whose timeout fell due, claimed for one claimer by
// [Store.ClaimDue] until the claim's lease ends. (A claim here is
// unrelated to registry.Claimer, which takes a lease handed over by a
// release.)
type DueGroup struct {
	Key     string
	Version int64 // the version when claimed
}

// Store keeps message groups. Implementations are safe for concurrent use.
// Errors other than ErrNotFound and ErrConflict come from the storage; an
// operation whose context is done returns an error wrapping ctx.Err().
type Store interface {
	// Add appends msg to the group of key, creating the group if needed,
	// unless the group knows msg.UUID already (Duplicate) or is complete
	// (Rejected). When it adds and timeout is positive it also sets the due
	// time to now plus timeout, ending any claim. It returns the group's
	// state after the call, without Messages.
	Add(ctx context.Context, key string, msg Message, timeout time.Duration) (Group, Outcome, error)

	// Get returns the group of key with its unreleased messages in arrival
	// order, or ErrNotFound.
	Get(ctx context.Context, key string) (Group, error)

	// Update applies u to the group of key. It fails with ErrNotFound if the
	// group does not exist and ErrConflict if u.IfVersion does not match.
	Update(ctx context.Context, key string, u Update) error

	// Remove deletes the group of key and all it remembers. When version is
	// not zero it fails with ErrConflict unless the group has that version.
	// Removing a missing group returns ErrNotFound.
	Remove(ctx context.Context, key string, version int64) error

	// ClaimDue claims up to limit groups whose due time has passed and that
	// nobody claimed in the last lease, oldest due first, for lease. A
	// claimed group is not returned again until its lease ends or its due
	// time changes. A claim grants nothing else: the claimer still takes the
	// group lock and checks the version.
	ClaimDue(ctx context.Context, limit int, lease time.Duration) ([]DueGroup, error)
}

// Locker is a Store that locks groups itself, in its own transactions:
// sqlstore's Store and Outbox take the group row's lock in the database.
// Handlers given a Locker and no registry (Config.Locks nil) protect each
// group with it instead of a lease in a lock table, which saves the
// lease's two commits per message.
type Locker interface {
	Store
	// Locked calls fn with a store whose calls run in one transaction that
	// holds the lock of the group of key: until fn returns, no other
	// Locked call on the group and no Add to it, in any process sharing
	// the storage, proceeds. fn's changes commit together when it returns
	// nil and are undone when it returns an error, which Locked returns.
	// The store fn gets is an Outbox when the Locker is one, valid only
	// until fn returns. Locked may call fn again after a transient
	// failure of the transaction (a deadlock, say), so fn must be safe to
	// repeat.
	Locked(ctx context.Context, key string, fn func(ctx context.Context, s Store) error) error
}

// Outbox is a Store that publishes messages in the transaction that changes
// a group, so that a release and its output are committed together or not
// at all (the transactional outbox pattern). A handler whose store is an
// Outbox publishes its output through it, and a consumer of the output topic
// sees each output once, without deduplicating. sqlstore.NewOutbox makes one
// that publishes to watermill-sql topics in the store's own database.
type Outbox interface {
	Store
	// UpdatePublish applies u to the group of key as Update does and, in the
	// same transaction, publishes msgs to topic. Either both happen or
	// neither: a publish failure undoes the update, and an update failure
	// (ErrNotFound, ErrConflict) publishes nothing.
	UpdatePublish(ctx context.Context, key string, u Update, topic string, msgs ...*message.Message) error
}

// Probe asks [Prober.AddProbe] how an added message fits the other
// unreleased messages of its group: the resequencer's twins (another
// message with the same sequence number) and sequence-size mismatches.
// Metadata values are compared as decimal integers, written as
// strconv.ParseInt reads them (an optional "+", leading zeros); a value
// that is not one never fits.
type Probe struct {
	// UniqueKey, when not empty, is a metadata key under which no other
	// unreleased message may have the value Unique.
	UniqueKey string
	Unique    int64
	// SameKey, when not empty, is a metadata key under which every other
	// unreleased message must have the value Same, or lack the key if
	// Same is 0.
	SameKey string
	Same    int64
}

// Prober is a Store whose Add can also probe the group it adds to, in
// the same atomic step (sqlstore's Store and Outbox on PostgreSQL, in its
// one statement). A handler whose store probes needs no read of the group
// to tell an ordinary message from one that needs looking at.
type Prober interface {
	Store
	// Probes reports whether AddProbe costs what Add costs and can report
	// a fit. Where it is false, AddProbe is Add and reports no fit.
	Probes() bool
	// AddProbe is Add, and also reports fits: true when, at the moment of
	// the Add, the group's other unreleased messages (those it held
	// before, whatever the outcome) all fit p. false means that some do
	// not, or that the store could not be sure (a change of the group
	// that committed while the Add waited for it); a caller that gets
	// false reads the group to decide.
	AddProbe(ctx context.Context, key string, msg Message, timeout time.Duration, p Probe) (g Group, o Outcome, fits bool, err error)
}

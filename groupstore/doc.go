// Package groupstore keeps message groups for correlating handlers: the
// aggregator (lockreg's package aggregator) and the
// resequencer. It is Spring Integration's MessageGroupStore, reduced to the
// operations those handlers need and shaped so that a SQL store can do each
// handler step in one short transaction.
//
// A group is identified by its correlation key within the store's region (a
// store option: stores in different regions never see each other's groups).
// It holds messages (UUID, metadata, payload) in arrival order and a state:
// complete or not, the last released sequence number, the number of releases
// so far, an optional timeout due time, creation and update times, and a
// version that every change increments.
//
// # Idempotency
//
// A message is recognised by its UUID for the life of its group: [Store.Add]
// reports a message whose UUID the group already holds, or has released, as
// [Duplicate] and changes nothing. Releasing a message ([Update.Release],
// [Update.ReleaseAll]) drops its metadata and payload but remembers its UUID
// until the group is removed, so a redelivered message is told apart from a
// late one. A store may remove finished groups after a retention
// (sqlstore.Store does, 7 days after a complete group's last change, see
// sqlstore.Config.CleanupRetention); a message of a removed group starts a new group.
//
// # Concurrency
//
// Every operation is atomic on its own. Callers serialize the steps of one
// group (read, decide, update) with a group lock; [Update.IfVersion] and
// [Store.Remove]'s version argument turn a lock that was lost meanwhile
// into [ErrConflict] instead of a lost update. Which lock protects a group
// in the aggregator and the resequencer:
//
//   - Memory store ([NewMemory]), no Config.Locks: an in-process
//     registry's lock (registry.NewLocal); a single instance.
//   - Any store with Config.Locks: that registry's lock on the group's
//     key, a lease in its lock table (package jdbc, redislock) when the
//     instances share one; the store's calls run in transactions of
//     their own under it.
//   - A [Locker] (sqlstore's Store and Outbox), no Config.Locks: the
//     store's own lock, the group row's, taken by [Locker.Locked] in the
//     transaction of the step (SELECT ... FOR UPDATE on PostgreSQL and
//     MySQL, the database's write lock on SQLite) and held until it
//     commits, across instances too. An aggregator message that cannot
//     release its group is added outside it, an Add being atomic (and
//     one statement on PostgreSQL): it waits for a Locked step on its
//     group, and a group completed meanwhile rejects it. So is a
//     resequencer message that cannot release a run, where the store is
//     also a [Prober] (sqlstore on PostgreSQL): its Add tells, in the
//     same statement, whether the group holds another message of its
//     sequence number or of another size, which the resequencer discards
//     at once under the lock. A group that another handling removed
//     between a message's Add and its Locked step took the message with
//     it: the message is done.
//
// # Timeouts
//
// Due times are kept in the store, measured by the store's clock (the
// database's for SQL stores), so that any instance can expire a group whose
// owner died. [Store.ClaimDue] hands each due group to one claimer for a
// lease; the claimer then takes the group lock, checks with [Store.Get] that
// the version is still the claimed one, and acts.
//
// # Outbox
//
// A store that implements [Outbox] publishes messages in the transaction of
// a group change ([Outbox.UpdatePublish]); the handlers publish through it
// when they have one, which makes their output exactly once into a topic in
// the same database (sqlstore.NewOutbox with watermill-sql).
//
// Implementations: [NewMemory] in this package, and sqlstore.New in package
// [github.com/lockreg/lockreg/groupstore/sqlstore] for PostgreSQL,
// MySQL/MariaDB and SQLite. Package groupstoretest holds the conformance
// suite both pass.
package groupstore

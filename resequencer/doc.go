// Package resequencer is a Watermill handler that releases the messages of
// each group in sequence order: Spring Integration's resequencer, with
// groups kept in a shared [groupstore.Store], a group lock from a
// [github.com/lockreg/lockreg/registry.LockRegistry] so that instances
// sharing the store take turns on a group, and group timeouts kept in the
// store so that they fire even when the instance that set them is gone.
//
// Messages carry their group's correlation key (metadata "correlation_id"
// by default), their 1-based sequence number ("sequence_number") and the
// group's size ("sequence_size"). Released messages go to the output
// topic unchanged but for their UUID.
//
// # Wiring
//
// [New] makes a [Resequencer] from a [Config]; [Resequencer.AddHandler]
// adds it to a message.Router with AddConsumerHandler and runs its timeout
// runner for as long as the handler's subscription lives:
//
//	rs, err := resequencer.New(resequencer.Config{
//		Publisher:               publisher,
//		OutputTopic:             "payments.ordered",
//		ReleasePartialSequences: true,
//		Store:                   store, // sqlstore.New(db, sqlstore.Config{}) to share groups between instances
//		Locks:                   locks, // registry.New(jdbcRepo) to share locks
//	})
//	rs.AddHandler(router, "resequence-payments", "payments", subscriber)
//
// # Order across instances
//
// A resequencer that returned its releases to the router would publish them
// after the handler returned, outside the group lock, and two instances
// releasing consecutive runs of a group could publish them in either order.
// Handle instead publishes under the group lock and records the release
// (the last released sequence number) only after Publish returned, with a
// version check. The next run can only be released by a handler that
// reads that record, so it is published after the earlier run's Publish
// returned, whichever instance handles it. If the lock's hold ends or may
// have ended ([registry.Lock.Done]) the handler, or the timeout runner,
// stops before publishing or recording anything more (calls in flight are
// canceled within 10 ms), and Handle returns an error wrapping
// ErrLockLost, so that the message is nacked and redelivered. The version checks alone keep the store right; the watch
// keeps a handler that lost its lock from publishing a run that the next
// holder publishes too, and from acking work it did not finish. The
// aggregator watches its group locks in the same way.
//
// # Guarantees
//
//   - A message is in the store, released or discarded before Handle
//     returns nil, so before the router acks it.
//   - For each group, a run is never published before an earlier one, so
//     the first publication of each sequence number is strictly increasing;
//     without a timeout every number from 1 to the sequence size is
//     released once all have arrived. A run whose publication or recording
//     failed may be published again (see the next point), never a run
//     that was already recorded.
//   - A release is published before it is recorded, so a failure in
//     between publishes it again on redelivery or expiry, with the same
//     output UUIDs (name-based UUIDs of the group's incarnation and the
//     sequence number). Output is therefore at least once, and in order
//     and exactly once for a consumer that deduplicates by UUID (the
//     aggregator package says what Watermill's Deduplicator gives).
//   - With a [groupstore.Outbox] store (sqlstore.NewOutbox with watermill-sql)
//     each run is published in the transaction that records it, so it
//     reaches the topic exactly once and in order, without deduplication.
//   - Late messages, duplicates, messages with invalid sequence metadata
//     and the messages of expired groups go to the discard topic, with
//     DiscardReasonKey set, when configured and are logged otherwise;
//     never dropped silently, and never waited for.
//   - A redelivery of a message the group holds or has released (by
//     Config.MessageID, default the UUID) is recognised and acked without
//     output.
//
// # Spring's options
//
// The options are those of Spring Integration's resequencer, with the same
// defaults, and behave as its documentation and ResequencerTests say
// except where noted (each is tested):
//
//   - ReleasePartialSequences releases the run that follows the last
//     released number as it completes (Spring: when the lowest number held
//     is the last released one plus one); without it the whole sequence is
//     released at once. Without a sequence size it resequences an
//     unbounded sequence.
//   - GroupTimeout and GroupTimeoutFunc (groupTimeoutExpression; see the
//     field) count from the last message. Spring cancels a group's timer
//     when a message arrives and sets none when that message releases a
//     run, so messages held behind a gap wait for a reaper; here the due
//     time set by the last message stands after a partial release.
//   - On expiry SendPartialResultOnExpiry releases every held message in
//     order, skipping gaps; Spring sends only the first contiguous run and
//     (by its source) removes the rest from the group unsent and
//     undiscarded.
//     Without it the held messages are discarded ("expired"); runs
//     released before stay released.
//   - ExpireGroupsOnTimeout is off by default, as Spring forces it: the
//     expired group is kept complete and a later message is discarded at
//     once as late; with it the group is removed and a later message starts
//     a new group, discarded only when that one times out (Spring's
//     testTimeoutDontExpire).
//   - A group whose whole sequence is released is kept complete, so that
//     late messages and redeliveries are recognised (Spring removes it);
//     ExpireGroupsOnCompletion removes it, MinimumTimeoutForEmptyGroups
//     removes it that long after.
//   - A message whose number is beyond the sequence size, or at or below
//     the last released one, is discarded at once; Spring keeps the first
//     waiting and lets the second stall partial releases.
//   - releaseLockBeforeSend is not offered: the order of runs across
//     instances rests on publishing a run under the group lock before it
//     is recorded (see above). popSequence does not apply: released
//     messages are sent as they came, as in Spring.
//
// # Costs
//
// With Config.Locks each handled message costs a lock acquisition and
// release and a store Add and Get; Get reads the group's unreleased
// messages, so a group of n messages that arrive in reverse order costs
// O(n²) in reads. A release adds a Publish and an Update. Without Locks, on
// a store that locks groups itself (sqlstore's), the lock is the group
// row's, in the store's transaction; on PostgreSQL, whose Add probes the
// group in its one statement (groupstore.Prober: another unreleased message
// with the same number, or another size; with script 000008 it reads
// that from the group's row, not from its messages), a message that can
// release nothing and fits its group costs that Add alone, and only the others
// (see Resequencer.Handle) are read under the lock and released; on MySQL
// and SQLite every message's Add and Get run in one such transaction. The timeout runner makes one ClaimDue per
// PollInterval and instance. GroupTimeoutFunc adds an Update to each
// message that releases and discards nothing. A kept complete group stays in the store,
// without messages, until MinimumTimeoutForEmptyGroups removes it or the
// store's own clean-up does (sqlstore.Store: 7 days after its completion,
// see sqlstore.Config.CleanupRetention).
//
// # Observability
//
// With Config.MeterProvider (by default that of Locks when it is a
// *registry.Registry) the handler records lockreg.handler.message.duration,
// lockreg.handler.messages.added and lockreg.handler.messages.discarded,
// lockreg.handler.groups.completed, lockreg.handler.groups.discarded and
// lockreg.handler.groups.expired, and lockreg.handler.store.duration, with
// the attributes lockreg.handler and lockreg.handler.name; with
// Config.TracerProvider each Handle is a span lockreg.resequencer.handle,
// a child of the span of the message's context, and each expiry a span
// lockreg.resequencer.expire. docs/observability.md describes every instrument.
package resequencer

// Package aggregator is a Watermill handler that combines related messages
// into one: Spring Integration's aggregator, with groups kept in a shared
// [groupstore.Store], a group lock from a
// [github.com/lockreg/lockreg/registry.LockRegistry] so that instances
// sharing the store take turns on a group, and group timeouts kept in the
// store so that they fire even when the instance that set them is gone.
//
// # Wiring
//
// [New] makes an [Aggregator] from a [Config]; [Aggregator.AddHandler] adds
// it to a message.Router with AddConsumerHandler and runs its timeout
// runner for as long as the handler's subscription lives:
//
//	agg, err := aggregator.New(aggregator.Config{
//		Publisher:   publisher,
//		OutputTopic: "orders.aggregated",
//		Release:     aggregator.ReleaseOnCount(3), // every 3 messages of a correlation id
//		Store:       store, // sqlstore.New(db, sqlstore.Config{}) to share groups between instances
//		Locks:       locks, // registry.New(jdbcRepo) to share locks
//	})
//	agg.AddHandler(router, "aggregate-orders", "order.lines", subscriber)
//
// Without Store and Locks the aggregator keeps its groups in memory and
// locks them in-process: a single instance that loses its groups on
// restart, which it says in one info log line when it starts.
//
// # Release
//
// The release strategy decides when a group is complete. The default,
// [ReleaseOnSequenceSize], is Spring Integration's: it needs the
// "sequence_size" metadata ([SequenceSizeKey]) on every message, which a
// Spring-style splitter sets and no Watermill component does. For
// messages that carry only a correlation id choose [ReleaseOnCount],
// [ReleaseWhen], or [ReleaseOnTimeout] with a Config.GroupTimeout. Under
// ReleaseOnSequenceSize a message without a valid sequence size is kept
// and acked, and logged at error level (Watermill loggers have no warning
// level) with an error wrapping [ErrNoSequenceSize], once per group and
// process, not per message. A group whose first message lacks the size is
// never released by the strategy: it waits for its GroupTimeout, or
// forever without one. A later message that lacks it is discarded as a
// misfit when its group is released.
//
// The aggregator publishes with the publisher it is given rather than
// returning messages from an AddHandler handler func, for three reasons. The
// timeout runner must publish outside any handler call (expired groups), so
// it needs a publisher anyway; with one publishing path both behave alike.
// And it publishes while it holds the group lock and before it marks the
// group completed: if the publish fails, the group stays as it was, the
// input is nacked, and the redelivery releases the group again, where a
// router-side publish would come after the group was already completed and
// the output would be lost. And with a [groupstore.Outbox] store, the
// publish and the completion are one transaction, which a router-side
// publish cannot join.
//
// # Group timeouts
//
// Config.GroupTimeout expires a group that long after its last message;
// Config.GroupTimeoutFunc (Spring's groupTimeoutExpression) computes the
// timeout from the group and the message after every message that does
// not release its group: a positive result moves the due time, zero
// clears it (no timeout), a negative one expires the group at once, in
// Handle. The due time lives in the store either way, so any instance's
// timeout runner fires it.
//
// # Nested splits
//
// Package [github.com/lockreg/lockreg/sequence] is the splitter side:
// sequence.Split gives each part its correlation_id, sequence_number and
// sequence_size, and saves those of a message that was itself a part on a
// stack under "sequence_details". The aggregator restores the top of that
// stack on its output by default (Spring's popSequence;
// Config.DisablePopSequence turns it off), so that the output of the inner
// aggregator is a part of the outer split again and the next aggregator
// releases it on its sequence size.
//
// # Processing
//
// Handle takes the group lock of the message's correlation key (key
// Config.LockPrefix + correlation key), waiting at most Config.LockTimeout;
// a lock timeout returns an error wrapping [ErrLockTimeout], so the message
// is nacked and redelivered instead of the handler hanging past the
// subscriber's ack deadline. Under the lock it adds the message to the
// store (which creates the group and, with a GroupTimeout, moves its due
// time), asks the release strategy, and on release publishes the output and
// completes the group. By default a completed group is kept, without its
// messages, so that late messages are recognised and discarded, until
// MinimumTimeoutForEmptyGroups or the store's own clean-up removes it
// (sqlstore.Store: 7 days after its completion, see sqlstore.Config.CleanupRetention).
//
// The hold of the group lock is watched ([registry.Lock.Done]), by Handle
// and by the timeout runner alike: if it ends, or may have ended, before
// the work on the group is done, nothing more is published or recorded
// (each step checks first), store calls and publishes in flight are
// canceled within 10 ms, and Handle returns an error wrapping
// [ErrLockLost], so that the message is nacked and redelivered rather than
// acked for work done without the lock. The store needs no
// such help: every change made under the lock is conditional on the
// group's version, and an Outbox publishes in the same transaction, so a
// handler that lost its lock cannot overwrite what the next holder did.
// What the watch adds is that it also publishes no output or discard that
// the next holder publishes again, and acks nothing it did not finish.
//
// With Config.ReleaseLockBeforeSend (Spring's releaseLockBeforeSend) the
// output is published after the group lock is released: under the lock
// the release only closes the group (complete, its messages kept), and
// the publish and the record of the release follow the unlock, guarded by
// the group's version instead of the lock; a release whose send failed or
// whose instance died is finished by the redelivery or a timeout runner.
// Spring publishes after its unlock too, but also completes the group
// there, outside the lock; here the group is closed before the unlock, so
// a message arriving during the send is late rather than added to a group
// being released. The field's doc says what else changes.
//
// # Guarantees
//
//   - A message is in the store before Handle returns nil, so before the
//     router acks it. A message Handle returned an error for is redelivered
//     by the subscriber.
//   - Redelivery of a message the group holds or has released (by
//     Config.MessageID, default the UUID) changes nothing and is acked.
//   - A release is published before the group is completed, so a crash or
//     failure in between publishes it again on redelivery or on expiry, with
//     the same output UUID: a name-based UUID of the group's incarnation
//     and the release's ordinal. Output is therefore at least once, and
//     once for a consumer that deduplicates by UUID; see below for what
//     Watermill's Deduplicator middleware gives, and an Outbox store for
//     exactly once without deduplication.
//   - Late messages and the messages of expired groups go to the discard
//     topic when configured and are logged otherwise; never dropped
//     silently. Messages without a correlation key are an error
//     ([ErrNoCorrelationKey]): route them to a poison queue.
//
// What holds with which pub/sub: with a subscriber that redelivers nacked
// messages (watermill-sql, Kafka, AMQP, NATS JetStream, GoChannel) nothing
// is lost; with GoChannel the store must outlive a crash for that to mean
// anything, which the in-memory store does not. Outputs are at least once
// with any publisher. One transport caveat, found by the cluster tests:
// watermill-sql v4.1.2 with PostgreSQLQueueOffsetsAdapter{DeleteOnAck:
// true} acks (deletes) a whole batch when its subscriber closes, or an ack
// deadline passes, mid-batch, undelivered messages included; use
// SubscribeBatchSize 1, keep Config.LockTimeout well below the ack
// deadline, and close routers once they are idle.
//
// # Deduplicating consumers
//
// Watermill's Deduplicator middleware (message/router/middleware) drops a
// republished output only when configured for it and only within limits:
//
//   - Its default KeyFactory hashes the payload, so it would also drop a
//     different output with an equal payload. Key it by the UUID:
//     middleware.Deduplicator{KeyFactory: func(m *message.Message)
//     (string, error) { return m.UUID, nil }}.
//   - Its default repository, NewMapExpiringKeyRepository, is a map in the
//     consumer's process that forgets keys after its window (a minute by
//     default): a copy that reaches another consumer instance, the same
//     one after a restart, or the same one after the window is handled
//     again. Across instances it needs an ExpiringKeyRepository that the
//     instances share.
//   - It records a key before the handler runs, so when the handler fails
//     the redelivery of that copy within the window is dropped, not
//     retried: at most once, not exactly once.
//
// Within one consumer process and window, then, a Deduplicator keyed by
// UUID passes each release to its handler at most once. A consumer that
// needs each release exactly once records the UUIDs it handled in the
// transaction of its own effect and skips the known ones. The package's
// tests check the key, the per-process scope and the dropped redelivery
// with the real middleware.
//
// # Exactly once into a SQL topic
//
// When Config.Store is a [groupstore.Outbox], the aggregator publishes each
// output through it, in the transaction that completes the group, and
// needs no Config.Publisher. [github.com/lockreg/lockreg/groupstore/sqlstore.NewOutbox]
// makes one that publishes to watermill-sql topics in the store's database:
//
//	store, _ := sqlstore.New(db, sqlstore.Config{})
//	outbox, _ := sqlstore.NewOutbox(store, func(tx *sql.Tx) (message.Publisher, error) {
//		return wsql.NewPublisher(wsql.TxFromStdSQL(tx),
//			wsql.PublisherConfig{SchemaAdapter: wsql.DefaultPostgreSQLSchema{}}, logger)
//	})
//	agg, _ := aggregator.New(aggregator.Config{Store: outbox, OutputTopic: "orders.aggregated"})
//
// The output and the group's completion then commit together or not at
// all, and the completion is conditional on the group's version, so a
// retry after a failure, or another instance after a crash, cannot publish
// the output a second time: each output reaches the topic exactly once.
// Discards still go through the discard publisher (at least once, with the
// discarded message's own UUID).
//
// With watermill-sql on PostgreSQL and one consumer group on the default
// schema, the subscriber's offsets row lock already serializes consumers;
// the group lock matters for competing consumers (PostgreSQLQueueSchema,
// brokers) and for the timeout runners of all instances.
//
// # Costs
//
// Each handled message costs a lock acquisition and release (no I/O with
// registry.NewLocal, one statement each with a jdbc repository) and one
// store Add (on PostgreSQL one statement, shared with the Adds that wait
// while every connection of the pool is busy: sqlstore.Config.GroupCommit); a release adds a
// Get, a Publish and an Update. With sqlstore and no Locks the group lock
// is the row's and costs no statement of its own: a message that does not
// complete its group is its Add alone, and on PostgreSQL a release is one
// transaction of 4 round trips (BEGIN, a Get that locks the row, the
// Update, COMMIT), and an Outbox adds its publisher's statements. The timeout
// runner makes one ClaimDue per PollInterval and instance.
// GroupTimeoutFunc adds an Update to each message that does not release
// its group; ReleaseLockBeforeSend adds an Update to each release.
//
// # Observability
//
// With Config.MeterProvider (by default that of Locks when it is a
// *registry.Registry) the handler records lockreg.handler.message.duration,
// lockreg.handler.messages.added and lockreg.handler.messages.discarded,
// lockreg.handler.groups.completed, lockreg.handler.groups.discarded and
// lockreg.handler.groups.expired, and lockreg.handler.store.duration, with
// the attributes lockreg.handler and lockreg.handler.name; with
// Config.TracerProvider each Handle is a span lockreg.aggregator.handle,
// a child of the span of the message's context, and each expiry a span
// lockreg.aggregator.expire. docs/observability.md describes every instrument.
package aggregator

// Package lockmw is a Watermill middleware that handles the messages of one
// key one at a time across instances, under a lock of a
// [github.com/lockreg/lockreg/registry.LockRegistry]:
//
//	perKey, err := lockmw.PerKey(locks, lockmw.KeyFromMetadata("entity_id"))
//	if err != nil {
//		return err
//	}
//	router.AddMiddleware(perKey)
//
// Messages of different keys run in parallel; a message of a key whose lock
// another handler holds, in this instance or another that shares the lock
// table, waits for it, at most the lock timeout ([WithLockTimeout],
// default 5 s). The lease is renewed while the handler runs, so a handler
// may run longer than the TTL; msg.Context() is cancelled, with a cause
// wrapping [ErrLockLost], when the lease is lost or could not be renewed in
// time, and such a run is nacked whatever the handler returns. The hold's
// fencing token is in the message's context ([Token]): pass it to the
// storage the handler writes, and let it refuse writes with older tokens,
// so that a holder that stalled past its lease (a long GC pause, a frozen
// VM) cannot overwrite newer work.
//
// Without a shared repository (registry.NewLocal) the locks hold within
// one process only.
//
// # Errors
//
// The middleware returns errors, so that the router nacks the message and
// Watermill's Retry and PoisonQueue middlewares apply: [ErrNoKey] for a
// message without a key (unless [WithMissingKey] says [RunWithoutLock]),
// [ErrLockTimeout] when the lock was not acquired in time, [ErrLockLost]
// when the hold ended before the handler returned.
//
// # Order of middlewares
//
// The router runs the middlewares added first outermost. The recommended
// order, which the package's tests run, is
//
//	router.AddMiddleware(
//		poisonQueue,                  // outermost: gets what Retry gave up on
//		middleware.Retry{...}.Middleware,
//		perKey,                       // innermost: one lock per attempt
//	)
//
// for these reasons:
//
//   - Retry outside the lock: each attempt takes the lock anew and the
//     backoff between attempts holds none, so a lock timeout or a lost
//     lease is retried like any other error, and other instances handle
//     the key meanwhile. Retry inside the lock would hold the key through
//     its backoff, stalling the key in every instance, and would never see
//     a lock timeout. The middleware puts the message's context back after
//     each attempt, so Retry needs no ResetContextOnRetry for it. Keep the
//     attempts times the lock timeout, plus the handler's time, under the
//     subscriber's ack deadline; Retry's ShouldRetry can skip [ErrNoKey],
//     which no retry cures.
//   - PoisonQueue outside Retry: a message that fails every attempt,
//     including one without a key, goes to the poison queue.
//     PoisonQueueWithFilter with a filter that refuses [ErrLockTimeout]
//     nacks lock timeouts for redelivery instead.
//   - Watermill's Deduplicator outside Retry, never inside it: it records
//     a message before the handler runs, so inside Retry it would take the
//     second attempt for a duplicate and ack it unhandled. Outside the
//     lock it drops a duplicate without a lock cycle. It deduplicates
//     within one process unless its repository is shared, and a message
//     whose handler failed is dropped when redelivered within its window:
//     at most once (see package aggregator's documentation).
//   - The aggregator and the resequencer lock their groups themselves. A
//     router-level PerKey also wraps their handlers, adding a second lock
//     cycle per message that buys nothing when its key is the correlation
//     id; add PerKey to the handlers that need it with
//     Handler.AddMiddleware instead. Never give it the prefix of their
//     locks (aggregator.DefaultLockPrefix) on the same registry: locks are
//     not reentrant, so the handler would wait for the middleware's lock
//     and fail with its own lock timeout.
//
// # Costs
//
// One lock cycle per message (an acquisition and a release statement with
// a jdbc repository), one renewal per third of the TTL a handler runs, and
// a goroutine per message in flight (two during a renewal).
package lockmw

// Package tasklock runs scheduled tasks at most once at a time across
// processes: ShedLock's guarantees for Go schedulers (time.Ticker,
// robfig/cron, go-co-op/gocron), on lockreg's lock table.
//
// Every instance of a service runs the same schedule; when a task is due,
// each calls [Executor.Run] with the task's name. The first to take the
// task's lock runs it; the others skip it at once, without waiting, and Run
// reports that it did not run.
//
// # Durations
//
// Two durations, as in ShedLock, configure a run:
//
//   - lockAtMostFor ([LockAtMostFor]) is the lease: if the holder dies, the
//     lock frees itself this long after it was taken. It defaults to the
//     registry's TTL ([registry.WithTTL], 10 s by default). Make it longer
//     than the task normally takes, or use keep-alive
//     ([registry.WithKeepAlive]) or [Extend].
//   - lockAtLeastFor ([LockAtLeastFor]) keeps the lock taken until at least
//     this long after it was taken, even if the task finished sooner, so that
//     an instance whose schedule fires a little later skips the run the
//     other has already done. Leave slack: with a schedule every P, a
//     lockAtLeastFor somewhat shorter than P (say 0.8 P) absorbs jitter
//     between instances without making the next run skip.
//
// Both are Go durations. ShedLock's strings map directly: lockAtMostFor =
// "14m" is LockAtMostFor(14*time.Minute), "PT30S" is 30*time.Second, and a
// plain number of milliseconds "500" is 500*time.Millisecond.
//
// # Time
//
// With package github.com/lockreg/lockreg/jdbc every decision is made with
// the database's clock: the lease's expiry, and lockAtLeastFor, which the
// release writes as EXPIRED_AFTER = greatest(now, acquired + lockAtLeastFor)
// instead of expiring the row at once (see [Releaser]). Instances whose
// clocks differ therefore never run a task twice. The application's clock
// is used only to stop work early: a task's context is cancelled a safety
// margin (a fifth of lockAtMostFor) before the lease would expire by the
// local clock.
//
// # Differences from ShedLock
//
//   - Losing the lease cancels the task's context (ShedLock lets the task run
//     on, possibly alongside another instance).
//   - [AssertLocked] and [Extend] find the lock in the context the task
//     receives, not in thread-local state, so they work across goroutines
//     that share that context.
//   - A [Lock] stays valid after [Lock.Extend]; ShedLock replaces the handle.
//   - There is no in-memory cache of existing rows: a deleted row is simply
//     inserted again.
//   - Owners are per-client UUIDs, not host names: a process cannot release
//     another process's lock on the same host.
//
// # ShedLock's table
//
// Package [github.com/lockreg/lockreg/tasklock/shedlock] provides a
// repository on ShedLock's own table (shedlock: name, lock_until,
// locked_at, locked_by), with ShedLock's statements, so that a Go task and
// a Java task using ShedLock under the same name run at most once at a time
// across both.
//
// # Observability
//
// An executor counts its runs, lockreg.task.runs by task and outcome (ran,
// skipped, error), with the meter provider of its registry options
// (registry.WithMeterProvider), beside the registry's own lock metrics,
// and logs its deferred unlocks' errors to registry.WithLogger's logger.
package tasklock

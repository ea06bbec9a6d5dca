// Package shedlock lets package tasklock's executors take their locks in
// ShedLock's table (shedlock: name, lock_until, locked_at, locked_by), so
// that a Go task and a Java task using ShedLock's JDBC provider
// (JdbcTemplateLockProvider) under the same name run at most once at a
// time across both:
//
//	repo, err := shedlock.NewRepository(ctx, db, shedlock.Config{UseDBTime: true})
//	...
//	executor, err := tasklock.New(repo, registry.WithTTL(14*time.Minute))
//	ran, err := executor.Run(ctx, "reportTask", report, tasklock.LockAtLeastFor(30*time.Second))
//
// Each [Repository] is one client of the table; the task name is the row's
// name, as ShedLock's @SchedulerLock(name = ...), unmapped. [CreateSchema]
// creates the table with ShedLock's DDL when it is missing.
//
// # Statements and time
//
// The statements are ShedLock's (StorageBasedLockProvider with its SQL
// statement sources), per dialect, in one of its two time modes:
//
//   - Application time (the default, ShedLock's default): now, lock_until =
//     now + lockAtMostFor and the unlock time max(now, acquired +
//     lockAtLeastFor) are this process's clock, truncated to the
//     millisecond, bound as parameters, as wall times in Config.TimeZone.
//     ShedLock binds them in the JVM's default zone unless
//     forceUtcTimeZone() is set: set TimeZone to that zone (UTC needs
//     nothing). Clock skew between the clients shifts every decision, as
//     in ShedLock.
//   - Database time (Config.UseDBTime, ShedLock's usingDbTime()): every
//     time is the database's UTC clock, read by the statements
//     (timezone('utc', CURRENT_TIMESTAMP), UTC_TIMESTAMP(3)), and the
//     unlock writes lock_until = max(now, locked_at + lockAtLeastFor) from
//     the stored locked_at. Instances' clocks do not matter.
//
// All the clients of one table must use one wall-time convention: UTC
// (database time, or application time in UTC) or the one zone of the Java
// fleet's application time.
//
// Acquire is ShedLock's insert-or-update: it takes the row when it is
// missing or its lock_until <= now, and writes lock_until, locked_at and
// locked_by. On PostgreSQL that is ShedLock's upsert (INSERT ... ON
// CONFLICT (name) DO UPDATE ... WHERE lock_until <= now), one statement; on
// MySQL/MariaDB the UPDATE, then, when it took nothing, an INSERT IGNORE
// (ShedLock's application-time insert is a plain INSERT whose duplicate-key
// error it catches: the outcome is the same); on SQLite, which ShedLock
// does not support, the upsert. Renew is ShedLock's extend (lock_until =
// now + lockAtMostFor where locked_by is ours and lock_until > now), Release
// and ReleaseAfter its unlock (lock_until = max(now, acquired +
// lockAtLeastFor) where locked_by is ours); on MySQL/MariaDB, whose Go
// driver counts changed rows where ShedLock's Connector/J counts matched
// ones, an extend or unlock that changed nothing (it wrote the values the
// row had) is followed by a SELECT of the rows it matched, so that it is
// not taken for a lost lock. Rows are never deleted, as
// ShedLock requires. Every statement runs on its own, in no explicit
// transaction, as ShedLock's REQUIRES_NEW transactions do.
//
// lockAtMostFor is tasklock's [tasklock.LockAtMostFor] (or the registry's
// TTL), lockAtLeastFor [tasklock.LockAtLeastFor]: both are honoured as
// ShedLock honours them, with one difference: after [tasklock.Lock.Extend],
// lockAtLeastFor still counts from the acquisition (ShedLock's
// application-time mode counts it from the extension).
//
// # Ownership
//
// ShedLock checks ownership only by locked_by, its host name. The default
// LockedBy here is the host name with a random suffix
// ("web-1/lockreg-3f9a0c2e"): readable in the table, and unique to the
// repository, so that neither another Go process nor a Java one on the same
// host can unlock or extend this repository's locks, nor this one theirs.
// Setting LockedBy to the bare host name makes it ShedLock's, and shares
// locks with every client on the host that does the same.
//
// # What holds, and what does not
//
// Mutual exclusion across Go and Java holds in both modes as long as the
// clients agree on the time convention (and, in application time, their
// clocks agree). lockAtMostFor and lockAtLeastFor hold as above. Leases
// carry no fencing token (token 0): the table has no column for one. A
// lease is not handed over, nor announced: a task that finds its lock
// taken skips, as ShedLock's do. Keep-alive ([registry.WithKeepAlive])
// works, through ShedLock's extend.
package shedlock

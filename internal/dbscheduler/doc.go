// Package dbscheduler replays Java db-scheduler v16's JdbcTaskRepository
// statement for statement, with the parameters Java binds, on
// db-scheduler's scheduled_tasks table: a Java node for package
// scheduler's interop tests, its fault tests (internal/chaos) and the
// benchmark. It is not a scheduler for production: it keeps db-scheduler's
// protocol, its clock (the host's, not the database's) and its flaws.
//
// What is replayed (the numbers are ../shared/reference/scheduler.md's):
//   - SchedulerClient.scheduleIfNotExists: S1, then S2 ([Node.Schedule]);
//   - the FETCH polling strategy: S3, then per due row S4 and, when it
//     picked the row, S1; PostgreSQL's LOCK_AND_FETCH: S5, and S7 for the
//     rows of names it cannot resolve (v16.12.0) ([Node.Poll]);
//   - completion: S8 after a success of a one-time task, S9 after a
//     failure (OnFailureRetryLater) ([Node.Poll]);
//   - the housekeeper: S11 heartbeats of the executions running
//     ([Node.Heartbeat]), S13 for names unresolved longer than
//     deleteUnresolvedAfter ([Node.DeleteUnresolved]) and S12 plus the
//     ReviveDeadExecution handler's S9 ([Node.ReviveDead]).
//
// Names a Node does not know are handled as TaskResolver does: a row of
// one seen by S3, S5 or S12 puts the name on an in-memory blacklist
// (task_name not in (...) in later fetches), with the first row's
// execution_time as the time it became unresolved.
//
// Times are the host's clock, bound as Java binds an Instant: on
// PostgreSQL as an OffsetDateTime in UTC, on MySQL/MariaDB as a Timestamp,
// that is the wall time in the JVM's zone ([Node.Zone]; UTC with
// alwaysPersistTimestampInUTC()), and on SQLite as sqlite-jdbc stores a
// Timestamp by default, epoch milliseconds.
package dbscheduler

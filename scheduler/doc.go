// Package scheduler is a persistent, cluster-safe task scheduler on one
// table: db-scheduler's model (github.com/kagkarlsson/db-scheduler) for Go,
// on PostgreSQL, MySQL/MariaDB and SQLite, sharing db-scheduler's
// scheduled_tasks table with Java nodes.
//
// A [Task] is a kind of work: [OneTime] tasks run once per execution, each
// with an instance id and JSON data; [Recurring] tasks have one execution
// that runs by a [Schedule] in code ([FixedDelay], [Daily], [Cron],
// [Parse]); [RecurringStored] tasks keep a schedule per execution in its
// data; [Custom] tasks decide in their handler what follows (a job chain's
// next step, with [Replace]). A [Client] schedules, reschedules, cancels
// and lists executions, also in the caller's transaction (ScheduleTx), so
// that a job exists only if the business change commits. A [Scheduler]
// runs the due executions of its tasks on Threads goroutines, in any number
// of processes.
//
// # Guarantees
//
// Every transition of a row is an UPDATE or DELETE guarded by the version
// the scheduler read, which it increments (db-scheduler's protocol): an
// execution is picked by one scheduler at a time, and a completion written
// after the execution was taken from its scheduler is refused. Picked
// executions carry the scheduler's Name and a heartbeat; one whose
// heartbeat is older than MissedHeartbeats × HeartbeatInterval is dead and
// its task's [DeadHandler] runs ([ReviveNow] by default). Heartbeats and the
// dead check read the database's clock, so a host whose clock is wrong can
// neither revive a live execution nor keep a dead one. The version of a
// running execution is its fencing token. Delivery is at least once: an
// execution whose scheduler dies mid-run runs again after it is revived;
// handlers that must not repeat an effect check Execution.Version or make
// the effect idempotent.
//
// Stop stops picking, waits for the running executions until its context
// ends, and unpicks what it holds, so that other nodes run it at once.
// Executions of task names a scheduler does not know are never picked and,
// unless DeleteUnresolvedAfter is set, never deleted.
//
// # Cost
//
// A fetch is one statement on PostgreSQL (UPDATE ... FOR UPDATE SKIP
// LOCKED ... RETURNING) and SQLite (UPDATE ... RETURNING), a transaction of
// two on MySQL/MariaDB, for up to FetchLimit executions. Completions of
// concurrent threads are written in one transaction per batch. Heartbeats
// are one transaction per HeartbeatInterval for all held executions. A
// scheduler wakes at the next due time it knows, when its own process
// schedules something, on PostgreSQL with a Listener when any process
// does, and otherwise every PollInterval.
//
// # Sharing the table with Java
//
// The table, columns and DDL are db-scheduler's (v16: priority included).
// Go writes task_data as JSON (never SQL NULL), times as db-scheduler binds
// them (timestamptz on PostgreSQL; on MySQL/MariaDB DATETIME wall time in
// Config.TimeZone, UTC by default as with Java's
// alwaysPersistTimestampInUTC(); epoch milliseconds on SQLite), picked_by
// within 50 characters and the instance id "recurring" for recurring tasks.
// Java nodes must use GsonSerializer or JacksonSerializer for the task
// names both run. A task name only Go runs is safe only in a table of its
// own or with the Java fleet's deleteUnresolvedAfter very long: stock
// db-scheduler picks such rows, blacklists the name and deletes all its
// rows 14 days later.
package scheduler

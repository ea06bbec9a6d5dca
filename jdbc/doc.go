// Package jdbc keeps lockreg's leases in a SQL table: it implements
// [registry.Repository] on PostgreSQL, MySQL/MariaDB and SQLite, on the lock
// table of Spring Integration's JDBC lock registry (INT_LOCK, see package
// [github.com/lockreg/lockreg/sql]), so Go and Spring applications can share
// locks.
//
// # Leases
//
// A row (LOCK_KEY, REGION, CLIENT_ID, CREATED_DATE, EXPIRED_AFTER, plus
// lockreg's FENCE, LOCK_NAME and HOLDER) is a lease: the client CLIENT_ID holds the lock on LOCK_KEY in REGION until
// EXPIRED_AFTER. LOCK_NAME and HOLDER make the row readable: LOCK_NAME is
// the key as the caller wrote it (LOCK_KEY is its MD5 UUID), written by the
// first lockreg acquisition of the row, and HOLDER describes the client
// that last took the lease, "host=... pid=... app=..." (see
// WithApplicationName), written by each acquisition and by a hand-over to a
// waiter; both are cut to 255 characters. A release leaves HOLDER, so it
// names the last holder of an expired row. Spring Integration's statements
// write neither: a Spring row has them NULL, and a lease a Spring client
// takes over keeps the HOLDER of lockreg's last holder, so trust HOLDER only
// next to a CLIENT_ID that is lockreg's. Unlike Spring Integration, which compares times of the
// application's clock, every statement reads the database's clock, so clock
// skew between application hosts does not move expiry. Times are stored as
// UTC wall time, as Spring writes them.
//
// Each of Acquire, Renew and Release is a single statement in its own
// implicit transaction, and once prepared on a connection costs one round
// trip on pgx, lib/pq and go-sql-driver/mysql:
//
//   - Acquire is an upsert guarded by "ours or expired" (ON CONFLICT ... DO
//     UPDATE ... WHERE on PostgreSQL and SQLite, ON DUPLICATE KEY UPDATE
//     with IF on MySQL). Contention yields "not acquired", never a
//     duplicate-key error. The same statement issues the fencing token
//     (FENCE): the database's clock in microseconds, or the row's previous
//     token plus one if that is greater. On PostgreSQL a row the repository
//     took before and found no other client holding lately is taken with a
//     plain UPDATE on the same conditions instead, which runs a few µs
//     faster (as ShedLock sends its UPDATE for a lock it has seen); when
//     that UPDATE affects no row (the row was deleted, or another client
//     took it or is releasing it) the upsert follows, and decides: two round
//     trips, which a key another client held lately skips.
//   - Renew moves EXPIRED_AFTER of this client's row only while the lease is
//     unexpired; it never revives an expired lease.
//   - Release expires this client's row in place, expired or not, so the
//     row keeps its token for the next holder; the clean-up removes it
//     later (see Clean-up). ReleaseAfter (for package tasklock) keeps the lease until a
//     minimum time after its acquisition, by the database's clock.
//
// On PostgreSQL the take statements of rows known to the repository and the
// releases of leases nobody waits for that arrive while one of their kind is
// in flight run together, up to 32 keys in one statement: one round trip and
// one commit (one flush of the log) for all of them, a group commit (see
// WithGroupCommit). The group statement locks each key's row with FOR
// UPDATE SKIP LOCKED, so that it never waits for a row lock while it holds
// others; a key whose row it skips, or finds held, runs the statements of
// one key above. With 16 goroutines on distinct keys this ran 1.2 to 2.1
// times as many lock cycles per second as ShedLock's statements on the same
// server (docs/benchmarks.md, "Take UPDATE, row hints and group commit").
//
// # Waiting on PostgreSQL
//
// On PostgreSQL, waiters that listen (WithListener) queue in a second
// table, prefix + "LOCK_WAIT": an acquisition takes a free lease only when
// no live waiter of another client began to wait earlier, so waiters are
// served in arrival order and a client that releases and asks again at once
// queues behind them. The release statement hands the
// lease directly to the first live waiter, with a new token and the lease
// length that waiter asked for, and tells it with a NOTIFY; WithListener
// makes the repository listen, so that the waiter, woken at once, takes
// the lease it was given without writing: the announcement carries the
// new token and the lease's length, which the release starts only once it
// has the row, so after the waiter's latest queue statement, and the
// waiter counts the lease from when it sent that statement (HandedLease:
// no statement at all, or one SELECT of the row when the announcement's
// token is not greater than the one that statement found, or when the
// wait took more than half of the lease). A release by a lockreg from
// before announcements carried the lease (December 2026) makes the waiter
// read the row; a waiter of such a lockreg does not recognise the new
// announcements and takes a lease handed to it at its next poll
// (registry.WithIdleBetweenTries), so during a rolling upgrade a hand-off
// may wait that long.
// Clients without a listener do not queue: they poll, and whoever polls
// first after a release takes the lease, as with Spring Integration (but
// never ahead of a listening waiter). Each of
// these stays one statement, one round trip. A waiter that stops waiting
// gives back a lease handed to it meanwhile (Leave), also one a release in
// flight hands it; one that crashes holds it until it expires, as a crashed
// holder does.
//
// A key nobody waits for costs no look-up of the queue: the lock table's
// has-waiters flag QUEUED_UNTIL (PostgreSQL only, script 000005, which
// CreateSchema adds) is raised by a waiter's queue statement to the deadline
// of its place whenever it does not take the lease, so that statement writes
// the lock row. An acquisition reads the queue (to let earlier waiters go
// first) only while the flag lies in the future; a release tries one plain
// UPDATE guarded by the flag first, and only while the flag is live, or when
// the lease was itself handed over (its queue probably goes on), runs the
// hand-off statement, which lowers the flag to the last place of the waiters
// it leaves queued (NULL when none remains). Because the waiter writes the
// row, it and a release take the row lock one after the other: the release
// either sees the flag (and hands the lease over, or, when the waiter queued
// after its snapshot, wakes the key's waiters with a NOTIFY of the key alone)
// or runs first, and the waiter's statement then takes the expired lease.
// A waiter's statement that queues commits asynchronously (it sets
// synchronous_commit off for its own transaction): a place only orders the
// waiters, a crash of the server can lose only the latest places, whose
// waiters ask again once their listener reconnects, and a release that
// hands the lease to a place flushes the place with its own commit. So a
// contended acquisition waits for one flush of the log, the release's,
// instead of two; a statement that takes a lease commits as the server is
// configured.
// In pgbench runs (docs/benchmarks.md) an acquire of such a key took 11 µs
// of server time on a quiet machine instead of 20 with the queue probe, its
// release 10 µs instead of 14; a listener's acquisition of a free lease
// costs about what it did (13 µs), and a waiter's attempt, which writes the
// lock row too, 4 µs more (17 µs; 8 to 12 µs more on a loaded machine). A row that is re-inserted after being
// deleted (by hand, or by the clean-up while a place is still live) starts
// with no flag: its first release does not look for those waiters, who get
// the lease when they next ask (their next statement raises the flag). With the pgx driver:
//
//	repo, err := jdbc.NewLockRepository(ctx, db, jdbc.WithListener(pgxlisten.New(db)))
//
// and with lib/pq, which listens on a connection of its own:
//
//	repo, err := jdbc.NewLockRepository(ctx, db, jdbc.WithListener(pqlisten.New(dsn)))
//
// MySQL/MariaDB and SQLite have neither: their waiters poll, and whoever
// polls first after a release takes the lease.
//
// # PgBouncer
//
// Through PgBouncer in session pooling mode (pool_mode = session) a client
// connection keeps one server connection, and everything works as on a
// direct connection: prepared statements, the listener, CreateSchema.
//
// In transaction pooling mode (pool_mode = transaction) each statement may
// run on another server connection. There:
//
//   - A prepared statement exists only on the server connection that
//     prepared it: make the repository with WithoutPreparedStatements, and
//     keep the driver from preparing too, with default_query_exec_mode=exec
//     in a pgx DSN or binary_parameters=yes in a lib/pq one. Each statement
//     still takes one round trip. Without the option the statements the
//     repository prepares fail, with an error that names it, or, as lib/pq
//     names statements alike in every client, may run another client's
//     statement of the same name; without the DSN setting pgx's own cached
//     statements fail the same way.
//   - LISTEN needs a session of its own: point the listener at PostgreSQL
//     itself (or at a session pool) while the statements go through
//     PgBouncer.
//   - CreateSchema works: it runs each statement on its own, unprepared.
//
// With pgx, whose listener copies the settings of the database it is given:
//
//	db, err := sql.Open("pgx", bouncerDSN+"&default_query_exec_mode=exec")
//	...
//	direct, err := sql.Open("pgx", serverDSN) // PostgreSQL itself, for LISTEN
//	...
//	repo, err := jdbc.NewLockRepository(ctx, db, jdbc.WithoutPreparedStatements(),
//		jdbc.WithListener(pgxlisten.New(direct)))
//
// and with lib/pq, sql.Open("postgres", bouncerDSN+"&binary_parameters=yes")
// and jdbc.WithListener(pqlisten.New(serverDSN)). Module tooltest of
// lockreg's repository checks each of these through a real PgBouncer.
//
// # Custom queries
//
// WithAcquireQuery, WithRenewQuery and WithReleaseQuery replace the default
// statements, as Spring Integration 6.1's query setters do. A custom query
// is one statement written in the templating rule of lockreg's own
// statements, which the dialect expands once, in NewLockRepository:
//
//	:lock_key   the mapped key (LOCK_KEY; a UUID by default)
//	:region     the repository's region
//	:client_id  the repository's client id
//	:ttl        the lease length in microseconds, an integer
//	:wait       how long a place in the queue lasts, in microseconds
//	:channel    the table's and region's notification channel (PostgreSQL)
//	:lock_name  the caller's key, readable, for LOCK_NAME (acquire only)
//	:holder     the repository's holder description, for HOLDER
//	{prefix}    the table prefix, so {prefix}LOCK names the lock table
//	{now}       the database's current UTC wall time, as the table holds times
//	{past}      a moment before {now}, the expiry a release writes
//	{clock}     the database's clock in microseconds since 1970
//	{now+:ttl}  {now} plus a parameter in microseconds ({now-:ttl} minus it)
//
// so that one query serves every dialect:
//
//	jdbc.WithRenewQuery(`UPDATE {prefix}LOCK SET EXPIRED_AFTER = {now+:ttl}
//		WHERE REGION = :region AND LOCK_KEY = :lock_key AND CLIENT_ID = :client_id`)
//
// Parameters and macros are read as Spring's NamedParameterJdbcTemplate
// reads parameters: not inside quotes or comments, and "::" (a PostgreSQL
// cast) is no parameter, so '12:00' and x::text stay as they are. Each
// occurrence of a parameter becomes a placeholder of the dialect ($1, $2,
// ... on PostgreSQL, ? elsewhere). NewLockRepository reports an unknown
// parameter or macro as ErrInvalidOption.
//
// # Errors
//
// Errors name the operation and the caller's key (not the mapped one).
// Failures that may pass on retry (serialization failures, deadlocks,
// lock-wait timeouts, SQLITE_BUSY and SQLITE_LOCKED with modernc.org/sqlite
// or mattn/go-sqlite3, broken connections) satisfy errors.Is(err,
// registry.ErrTransient); they are told apart by SQLSTATE and driver error
// codes, never by message text, except go-sql-driver/mysql's
// ErrInvalidConn (a connection that broke in the middle of a statement),
// which is errors.New("invalid connection") and is recognised by that
// exact text: package jdbc imports no driver. An operation whose context is
// done returns an error wrapping ctx.Err(). A missing table is reported as
// ErrNoTable, a table lockreg cannot use (of neither Spring layout, without
// lockreg's FENCE, or of the other layout than WithLayout asks for) as
// ErrUnsupportedLayout, by NewLockRepository already.
//
// A custom acquire query issues token 0 and leaves the queue out; a custom
// release query sends no notification.
//
// # Clean-up
//
// Expired rows stay in the lock table (one per key ever locked), and lapsed
// places stay in PostgreSQL's queue. A LockRepository deletes them in the
// background, on by default: lock rows expired for more than 1 h
// (WithCleanup), only once their token is also more than that behind the
// database's clock, so that tokens keep increasing unless the clock steps
// back by more than the retention; lapsed places in the queue without a
// retention. Live leases are never deleted, nor, on PostgreSQL, rows whose
// has-waiters flag is live. One repository of a table and
// region does the work per interval (5 min): it takes a lease in the lock
// table, and the others skip. Each statement deletes at most 1000 rows,
// with a pause between batches. The goroutine starts with the first
// acquisition and stops with Close (a registry's Close closes its
// repository). WithoutCleanup turns it off; DeleteExpired cleans on demand.
//
// # Spring Integration 5.4-6.x tables
//
// Spring Integration before 7 (Spring Boot 2.4 to 3.x) keeps no
// EXPIRED_AFTER: its INT_LOCK row expires the registry's TTL after its
// CREATED_DATE, which its acquire (UPDATE ... SET CLIENT_ID=?,
// CREATED_DATE=? WHERE ... AND (CLIENT_ID=? OR CREATED_DATE<now-ttl), then
// INSERT) and renew set to now. NewLockRepository detects such a table from
// its columns (or is told with WithLayout(LayoutSpring6), which also makes
// CreateSchema create one) and speaks its protocol, beside those
// applications, with these rules:
//
//   - The table TTL (WithSpring6TTL, by default Spring's 10 s) must equal
//     the Spring registries' (JdbcLockRegistry / DefaultLockRepository
//     setTimeToLive): Spring judges every row by its own TTL, so a lease is
//     the table TTL from the acquisition or renewal, for every client.
//     Acquire and Renew refuse a longer ttl (registry.ErrInvalidTTL): the
//     registry's TTL must not exceed it (a shorter one only makes this
//     client give up its leases early). Per-lock TTLs longer than the table
//     TTL cannot work.
//   - Expiry is measured from the acquisition or last renewal, as Spring
//     measures it: CREATED_DATE + TTL. lockreg writes CREATED_DATE with the
//     database's UTC clock, Spring with its application clock in UTC wall
//     time (6.x: LocalDateTime.now(ZoneOffset.UTC)); 5.x binds new Date(),
//     the JVM zone's wall time, so 5.x JVMs must run in UTC
//     (-Duser.timezone=UTC). Skew between the Spring hosts' clocks and the
//     database's shifts expiry between the two sides by the skew; lockreg's
//     own decisions use the database's clock only.
//   - CreateSchema adds lockreg's FENCE (BIGINT NOT NULL DEFAULT 0), which
//     Spring's statements leave to its default, and nothing else: the
//     readable LOCK_NAME and HOLDER of Spring 7 tables are neither added
//     nor written on such a table. Fencing
//     tokens are issued to lockreg's holders and increase across them,
//     releases included (a release expires the row in place, setting
//     CREATED_DATE a TTL and a millisecond back; Spring's unlock deletes its
//     rows, after which tokens restart from the clock, as after the
//     clean-up). Spring holders get no token and check none.
//   - Hand-off through the waiter queue and notifications (WithListener) is
//     not available: the table has no queue, and Spring neither queues nor
//     announces. Waiters poll, as Spring's do. The background clean-up is
//     off (its lease would outlast the table TTL); DeleteExpired works.
//   - Renew never revives an expired lease, and ReleaseAfter (tasklock's
//     lockAtLeastFor) works, on the database's clock.
//   - Spring 6.x before 6.0.8 and 6.1.4 acquires in SERIALIZABLE
//     transactions, later ones in READ COMMITTED; lockreg's single upsert
//     excludes both (it and Spring's UPDATE wait on the row lock and the
//     primary key decides racing INSERTs; a serialization failure on the
//     Spring side is a retry there).
//
// # Message groups
//
// The message groups of the aggregator and resequencer are kept beside the
// lock table by package [github.com/lockreg/lockreg/groupstore/sqlstore],
// which builds on this one; this package links neither Watermill nor any
// driver.
//
// # MySQL
//
// Acquire reads its outcome from the LAST_INSERT_ID the server returns with
// the result (the token, or 0 when the lock is held elsewhere) rather than
// from the affected-rows count of ON DUPLICATE KEY UPDATE alone, which
// clientFoundRows=true in the go-sql-driver/mysql DSN changes (an unchanged
// row then counts as affected); so the default statements work with and
// without that setting. A custom acquire query is judged by its affected
// rows only: NewLockRepository refuses one, with ErrClientFoundRows, on
// connections with clientFoundRows=true.
//
// # Observability
//
// A LockRepository is a registry.Describer: a registry's metrics, spans and
// logs name its backend ("postgresql", "mysql", "sqlite"), region and
// client. With WithMeterProvider it records lockreg.jdbc.statement.duration
// (s, by operation and outcome) and lockreg.jdbc.listener.reconnects;
// WithLogger sets the logger of its background errors, which repeat at
// most once per 10 s in the log. docs/observability.md describes every
// instrument.
package jdbc

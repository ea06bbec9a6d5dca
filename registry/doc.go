// Package registry hands out keyed locks that exclude each other across
// goroutines and, through a shared [Repository], across processes.
//
// A [Registry] is Spring Integration's JdbcLockRegistry for Go: [Registry.Obtain]
// returns a [Lock] for a key; locking it first takes a local, per-key
// primitive, so that of the goroutines of one process that wait for the same
// key only the first asks the database, and then takes a lease in the
// repository, retrying every idle interval (default 100 ms) while another
// process holds it (sooner when a repository that announces releases, such
// as package jdbc's on PostgreSQL with a listener, wakes it).
// Leases expire after a TTL (default 10 s) unless renewed, so a crashed
// holder cannot block a key forever.
//
// Locks are not reentrant, like [sync.Mutex]: a goroutine that locks a lock
// it already holds waits for itself. A lock may be unlocked by a goroutine
// other than the one that locked it.
//
// Lock objects of keys that are neither held nor waited on are kept in an LRU
// cache (capacity 100 000 by default); held and awaited locks live outside
// it, are never evicted and do not count against the capacity. Lock objects
// of the same key, even one obtained before an eviction, always exclude each
// other.
//
// The repository for SQL databases is in package
// github.com/lockreg/lockreg/jdbc, the one for Redis in package
// github.com/lockreg/lockreg/redislock; [NewLocal] needs no database.
//
// # Observability
//
// With [WithMeterProvider] a registry records, through the OpenTelemetry
// API, lockreg.lock.acquisitions (by outcome: acquired, not_acquired,
// error), lockreg.lock.wait.duration and lockreg.lock.hold.duration (s),
// lockreg.lock.held, lockreg.lock.leases_lost (by reason: expired, renewal,
// release), lockreg.lock.renewals (by outcome), lockreg.lock.handoffs and
// lockreg.lock.retries (by operation), each with the attributes
// lockreg.backend and lockreg.region that the repository reports as a
// [Describer]. With [WithTracerProvider] it traces lockreg.acquire,
// lockreg.hold and lockreg.release spans. Without them it records nothing,
// at the cost of a nil check per hook. [WithLogger] sets where errors
// without a caller go, with the fields key, region, client and backend.
// docs/observability.md in the repository describes every instrument.
package registry

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
// # Cost
//
// Each repository call is bounded by the lease's TTL: a statement that takes
// longer would return an expired lease, so it is cut and retried as a
// transient error. Callers without a deadline of their own (Lock, Unlock,
// context.Background) share one deadline context per registry, made anew
// every TTL/16, so such a statement's deadline lies between 15/16 of the TTL
// and the TTL after it starts; a caller whose deadline comes sooner is
// bounded by it alone. Beyond what the repository does, an uncontended Lock
// and Unlock of a key allocates one object (the hold, 144 B), starts no
// goroutine and arms one timer that belongs to the key (the watchdog of
// Done); Done's channel is made when first asked for, a retry's backoff
// only when a call fails. With a context that carries values, each call
// adds one small wrapper; with a cancelable context, or a TTL other than
// the registry's (LockTTL, RenewTTL), one context.WithDeadline per call.
//
// The repository for SQL databases is in package
// github.com/lockreg/lockreg/jdbc, the one for Redis in package
// github.com/lockreg/lockreg/redislock, the one for etcd v3 in package
// github.com/lockreg/lockreg/etcdlock (a module of its own); [NewLocal]
// needs no database.
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

// Package redislock keeps lockreg's leases in Redis: it implements
// [registry.Repository], [registry.Notifier] and [registry.HandOffQueue]
// with github.com/redis/go-redis/v9, after Spring Integration's
// RedisLockRegistry, so that a [registry.Registry] locks across processes
// through Redis instead of a SQL table:
//
//	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
//	repo, err := redislock.New(c, redislock.WithRegion("billing"))
//	...
//	locks, err := registry.New(repo, registry.WithTTL(30*time.Second), registry.WithKeepAlive())
//
// New takes any redis.UniversalClient; the tests run it on a *redis.Client
// and on a *redis.ClusterClient. The repository never closes the client.
// The scripts rely on Redis' effect replication (the default since Redis
// 5); the tests use Redis 7.0.
//
// # Leases
//
// A lease on key K in region R under prefix P is the Redis string P{R:K},
// whose value is the owner's client id and whose expiry, set with PX, is
// judged by the server's clock: clock skew between application hosts
// does not move it. Each operation is one Lua script, one round trip:
//
//   - Acquire sets the key if it is absent (expired keys are absent) or
//     already this client's, extending it; when another client holds it,
//     it reports false. The same script issues the fencing token.
//   - Renew extends this client's key only while it exists: an expired
//     lease is gone and is never revived. Another client's key, or none,
//     is registry.ErrLockLost.
//   - Release deletes this client's key (or hands it on, see Waiting) and
//     publishes the release; another client's key, or none, is
//     registry.ErrLockLost. go-redis retries a command whose connection
//     failed, so a release whose reply was lost may run twice: the script
//     records the token it released, and the retry reports success.
//
// Keys and the channel are named so that Redis Cluster keeps each lock's
// keys in one slot: the part in braces, the hash tag, is the region and
// the key, and the keys that belong to a lock only add a suffix after it
// (P{R:K}:token, :queue, :places), so one script may touch all of them,
// whatever braces K contains. Distinct locks spread over the slots. The
// prefix (default "lockreg:") may not contain braces, the region no ':'.
//
// # Fencing tokens
//
// Each lease carries a token (registry.Lease.Token, Lock.Token) greater
// than every earlier token of its key, whoever held it: the counter
// P{R:K}:token plus one, or the server's clock in microseconds if that is
// greater. The counter is kept for an hour after the lease's last
// acquisition, renewal or release, so it outlives the lease; a key unused
// for longer starts again from the clock. Storage that accepts a write only
// with a token not below the greatest it has seen refuses a holder that
// stalled past its lease.
//
// If Redis loses data (a restart without persistence, a failover to a
// replica that missed the last writes, FLUSHDB, an eviction), the counter
// is gone or behind: the next token is then the server's clock, which is
// still greater than every token issued before, since those were at most
// the clock when they were issued, plus one per acquisition issued faster
// than one per microsecond. That holds as long as the clock of the server
// that issues the next token has not stepped back behind the time the last
// token was issued: after a failover, the new primary's clock must not lag
// the old one's by more than the time between the last token and the next.
// Keep the servers' clocks synchronized (NTP).
//
// # Waiting
//
// A registry waiting for a key puts its client in the key's queue
// (AcquireOrWait; a sorted set by arrival, its places lapse after
// WithQueueTTL, 1 s by default, unless renewed by the next attempt). A free
// lease is taken only when no live waiter of another client is ahead, and
// a release hands the lease straight to the first live waiter, with a new
// token and the lease length it asked for, so waiters are served in the
// order they began to wait and a client that releases and asks again at
// once queues behind them.
//
// Every release is published on the channel P{R}:released (a digest of the
// key, and the client it was handed to). The repository subscribes with
// one connection of its own, opened by its first waiter: a waiter whose
// lease was handed to it is woken and only reads the lease (HandedLease);
// a release that handed the lease to nobody wakes every waiter of the key.
// Announcements are hints: a waiter that misses one, while its connection
// is re-established, say, finds out at its next attempt, one idle interval
// later. The connection is pinged after 5 s of silence; when it fails, the
// error goes to WithErrorHandler, every waiter is woken, and it reconnects
// with capped, jittered backoff (100 ms doubling to 30 s). A waiter that
// gives up leaves the queue and gives back a lease handed to it meanwhile
// (Leave); one that crashes holds a lease handed to it until it expires,
// as a crashed holder does.
//
// # Errors
//
// Errors name the operation and the caller's key. Failures that may pass
// on retry satisfy errors.Is(err, registry.ErrTransient): connections that
// fail or cannot be made, a pool without a free connection, and the
// replies LOADING (a restarted server reads its data), BUSY (a script runs
// too long), TRYAGAIN, CLUSTERDOWN, MASTERDOWN, READONLY (a failover made
// the node a replica), NOREPLICAS, OOM and the limit of clients, told apart
// by the reply's error code. Other replies, such as WRONGTYPE (something
// else lives at a lock's key), NOPERM or WRONGPASS, are returned as they
// are. An operation whose context is done returns an error wrapping
// ctx.Err().
//
// # What Redis cannot promise that PostgreSQL does
//
// Package jdbc's leases are rows committed to a durable, synchronously
// written table; a Redis lease is a key in memory. Whether it survives is
// a matter of the server's configuration:
//
//   - Persistence. Without it (save "" and appendonly no, as the tests run
//     Redis) a restart loses every lease: another client may take a key at
//     once while its holder still works, until its next renewal finds the
//     lease lost and Done closes. With appendonly yes and appendfsync
//     everysec a crash loses up to a second of acquisitions; only
//     appendfsync always writes each one to disk before answering.
//   - Failover. Replication is asynchronous: a lease acquired on the
//     primary may not have reached the replica that Sentinel or Cluster
//     promotes, and the new primary grants it again, to another client.
//     WAIT would narrow that window, not close it. PostgreSQL with
//     synchronous replication does not lose a committed row.
//   - Replication lag. The scripts write, so they run on the primary; a
//     client that reads lock keys from replicas sees stale owners.
//   - Eviction. Under maxmemory with any policy but noeviction, Redis may
//     drop lock keys (the volatile policies prefer exactly such keys with a
//     TTL), which frees held leases. Use maxmemory-policy noeviction; a
//     full server then answers OOM, which is transient.
//   - Clock jumps. Redis expires keys by its wall clock: a step forward on
//     the server expires leases early, a step back extends them; after a
//     failover the new primary's clock decides. jdbc reads the database's
//     wall clock too, but its rows do not vanish with a server.
//
// Fencing tokens (above) are what keeps storage safe when one of these
// makes two clients hold a key at once, provided that storage checks them.
//
// # Redlock
//
// Redlock takes the same lease on a majority of N independent Redis
// primaries (no replication between them). It would add tolerance of the
// loss of a minority of them: a restart or failover of one node no longer
// frees a lease, if a restarted node stays out for the longest TTL or
// persists every write. It would not make the lock safe where timing
// fails, as Martin Kleppmann's critique ("How to do distributed locking",
// 2016) shows: it assumes bounded network delay, process pauses and clock
// drift, so a holder paused past its TTL (a GC pause, a stalled VM) still
// acts beside the next, and Redlock issues no fencing token for storage to
// tell them apart. This package issues tokens and closes Lock.Done a fifth
// of the TTL before an unrenewed lease expires; both count only if the
// work checks them.
//
// # When to pick which
//
// Pick package jdbc on PostgreSQL when a lock guards correctness and
// the database is there anyway: leases survive restarts and failovers, and
// a Spring Integration application can share them. Pick redislock for
// locks that save duplicate work or smooth contention, where an occasional
// second holder after a Redis restart or failover costs little, or where
// the guarded storage checks the fencing token; in the benchmark of
// lockreg's repository (docs/benchmarks.md) it locks and unlocks several
// times as often per second as package jdbc on PostgreSQL.
package redislock

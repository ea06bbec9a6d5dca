// Package etcdlock keeps lockreg's leases in etcd v3: it implements
// [registry.Repository], [registry.HandOffQueue], [registry.Notifier],
// [registry.Checker] and [registry.Describer] over
// go.etcd.io/etcd/client/v3, so that a [registry.Registry] (and the
// aggregator, lockmw, tasklock and leader on it) locks across processes
// through an etcd cluster:
//
//	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second})
//	...
//	repo, err := etcdlock.New(cli, etcdlock.WithRegion("billing"))
//	...
//	locks, err := registry.New(repo, registry.WithTTL(30*time.Second), registry.WithKeepAlive())
//
// It is a module of its own (github.com/lockreg/lockreg/etcdlock), so that
// programs that do not import it do not get etcd's client and gRPC. The
// repository never closes the client. The tests run it on a cluster of
// three etcd 3.7 members.
//
// # Entries and leases
//
// A lock on key K is a directory of keys, one per client that holds or
// waits for it, as with etcd's own concurrency.Mutex: the prefix, the
// region and a NUL, then K's length, ':' and K (or '#' and its hex
// SHA-256, for keys over 256 bytes) and a NUL, then the client id. The
// entry created first, by create revision, holds the lock; the others
// wait in that order.
//
// Each entry is attached to an etcd lease of its own, granted for the TTL
// the caller asked for, rounded up to a second (etcd's unit), plus one
// second of slack (the cluster raises a shorter one to its minimum, 1.5
// election timeouts rounded up, 2 s with etcd's default 1 s election
// timeout). One lease per entry, not one session lease per repository,
// because a lock's TTL is what bounds how long a crashed or partitioned
// holder keeps others out: at most the TTL rounded up to a second, plus
// the second of slack, after its last acquisition or renewal. With one
// session lease, every lock of a process would outlive its holder by the
// session's TTL (concurrency.Session's default is 60 s), whatever TTL the
// lock asked for (registry.WithTTL, Lock.LockTTL), and a lock could not be
// made to last longer than the session without keeping all of them alive.
// The slack is what lets a lease granted ahead still last the whole TTL
// from a later acquisition or hand-off, for a second, with no request of
// its own: a lease granted for exactly the TTL no longer does by then. It
// costs a lease grant per acquisition, a Raft write more than a session
// lease, unless a spare lease serves:
//
// A client that logs in without a password (none, TLS certificates or a
// token) keeps the lease of a released hold, which no key uses any more,
// as a spare (up to 64 per TTL, none past half its TTL as granted): a
// release then deletes the entry in one transaction that checks its
// create revision, and the next new entry of the same TTL is attached to
// a spare by the transaction that writes the entry alone, while the
// spare's grant or last keep-alive was sent within the slack (a second)
// before the acquisition began, so that the spare lasts the TTL from then
// at least; else with one keep-alive (LeaseKeepAlive, answered by the
// leader without a Raft write) sent beside that transaction: the entry
// counts only once both succeeded, and the keep-alive, sent after the call
// began, makes the lease last from then on as long as a new grant would.
// A spare reused every few milliseconds thus costs a keep-alive about once
// a second. A waiter handed the lock within a second of its lease's grant
// or last keep-alive sends nothing more; later, it keeps its lease alive
// the same way rather than moving to a new lease. A spare has no key: a process that dies with
// spares holds and queues for nothing. The keep-alives of all the
// repositories on one client go over one lasting stream, opened in the
// background by the first that needs it and again after it fails, and
// stopped by the Close of the last of them: etcd's KeepAliveOnce opens a
// stream per call, and for a client with a user name and password the
// client logs in anew (a bcrypt check on the server) for every stream.
// While the stream is not open, new entries get new grants and hand-offs
// move to new leases, so no call waits for the stream. A client with a
// user name and password keeps no stream and no spares (its keeper would
// log in, a bcrypt check, each time the first repository of the client
// needs it): a release revokes the lease and every new entry gets a new
// grant. Its leases have the second of slack too: a waiter handed the lock
// within a second of its place's grant holds it on that lease, where it
// would otherwise move to a new one (a grant, a transaction and a
// revocation).
//
// The cluster expires a lease by its leader's clock, so clock skew
// between application hosts does not move it; a new leader extends every
// lease by an election timeout rather than shortening any. Within its
// process a hold also has a deadline, its TTL after its acquisition or
// last renewal was sent, at which the repository revokes the lease unless
// renewed: so a sub-second TTL lasts what was asked for, not up to two
// seconds more, and the slack never lengthens a live hold. The deadline can only end a hold sooner than the cluster
// would; no host ever decides that another host's lease has expired.
//
// A renewal (Renew, or Acquire of a lock this client holds) moves the
// entry to a newly granted lease, in a transaction that writes the entry
// only if it still exists with its create revision, and revokes the old
// lease in the background: a lease the cluster expired has deleted its
// entry, so a renewal never revives it, and a renewal can lengthen a
// lease beyond the TTL it was granted with, which a keep-alive cannot.
//
// # Fencing tokens
//
// A hold's token is its entry's create revision. etcd's revision is one
// counter for the whole cluster, raised by every write and kept across
// leader changes and restarts, so tokens strictly increase: the holder is
// always the oldest entry of its directory, so an entry that becomes
// holder was created after the entry of every earlier holder, or existed
// beside it with a higher revision. A renewal rewrites the entry in place
// (its create revision, and so the token, stays); a release deletes it,
// and the next hold, whether the next waiter's or a new entry's, has a
// greater token. Unlike redislock's tokens, these cannot go back when the
// store loses data short of a restore from an older backup.
//
// # Waiting
//
// A registry waiting for a key writes its client's entry
// (AcquireOrWait), which keeps its place in arrival order; Acquire, used
// by TryLock, takes a lock only when its directory is empty, so it never
// overtakes a waiter, and a client that releases and asks again at once
// queues behind the others. Each waiter watches only the entry just before
// its own (Notify), as concurrency.Mutex waits, so a release, which
// deletes the holder's entry (or revokes its lease, which deletes it), wakes exactly
// the next waiter, in whichever process it is; that waiter then reads
// that it holds the lock (HandedLease) and no other waiter hears of it.
// A waiter that vanishes loses its place when its lease expires, or when
// it leaves the queue (Leave) on giving up.
//
// # Losing the cluster
//
// A hold's Done channel (registry.Lock.Done) closes a fifth of the TTL
// before its deadline unless renewed: a holder cut off from the cluster
// cannot renew, so Done closes before its lease can expire by the
// cluster's clock, and another client can take the lock only after that.
// Every call is bounded by its context; the registry bounds each by the
// lease's TTL, the repository's background reads and revocations by
// seconds. An error for a call that did not finish in time says, when no
// endpoint is connected, which endpoints do not answer.
//
// # Errors
//
// Errors name the operation and the caller's key. Failures that may pass
// on retry satisfy errors.Is(err, registry.ErrTransient): no leader, a
// leader change, a member stopping or overloaded, a request timed out
// inside the cluster, no endpoint reachable. Refusals, such as permission
// denied for a user without a role on the prefix, are returned as they
// are, so a registry's Lock fails at once rather than waiting. New refuses
// a prefix that does not end in '/' and a region with '/': with them, two
// prefixes and regions could name the same keys.
//
// # What etcd promises that PostgreSQL and Redis do not
//
// A lease is committed to a majority of the members before the call
// returns (Raft), so losing a minority of the members, the leader among
// them, loses no lease and grants none twice: with three members, one may
// fail; with five, two. Redis replicates asynchronously and may grant a
// lease again after a failover; PostgreSQL keeps leases across a
// failover only with synchronous replication. Expiry is judged by the
// cluster's leader, and tokens come from one revision counter that no
// failover or restart resets.
//
// What it costs: each acquisition is two writes through Raft (a grant and
// a transaction) and each release one (a revocation or a transaction),
// each a round trip to the leader and an fsync on a majority; with a
// spare lease (above), an acquisition is one write, and a keep-alive
// beside it for a spare last refreshed over a second before. A renewal
// is two writes; a crashed holder keeps a lock up to a second longer than
// its TTL rounded up to a second. A client without a password and with
// more than one endpoint sends its transactions straight to the leader:
// its keeper finds the leader among the endpoints (a Status call to each)
// and dials it alone, where etcd's balancer spreads requests over all the
// members and a follower forwards each write to the leader and answers
// only once it has applied the entry itself; after an election, or when
// that connection fails, transactions go through the client's balancer
// until the new leader is found. etcd holds
// its data in memory and is built for small data (a few GiB): it suits
// locks, not the data they guard. A cluster without a majority (two of
// three members down) serves no lock at all, where a single PostgreSQL
// server would still serve.
package etcdlock

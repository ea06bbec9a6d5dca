package registry

import (
	"context"
	"time"
)

// Repository is the storage a [Registry] keeps its leases in: one client of a
// shared lock table. Every Repository value is one client with its own
// identity; two registries must not share one Repository, because both would
// own the same leases.
//
// A Registry calls a Repository for a given key from at most one goroutine at
// a time, so implementations need not serialize calls per key, but they must
// be safe for concurrent use across keys.
//
// Errors: an implementation wraps errors that may succeed on retry
// (serialization failures, deadlocks, lock-wait timeouts, dropped connections)
// so that errors.Is(err, [ErrTransient]) reports true, and returns errors that
// wrap [ErrLockLost] when a lease is no longer this client's. When ctx is done
// it returns an error that wraps ctx.Err(). A ttl that is not positive gets
// an error wrapping [ErrInvalidTTL].
type Repository interface {
	// Acquire takes the lease on key for ttl if nobody holds it, if it has
	// expired, or if this client already holds it (then it is extended to
	// ttl). It reports false with a nil error when another client holds an
	// unexpired lease. A lease it takes carries a fencing token.
	Acquire(ctx context.Context, key string, ttl time.Duration) (Lease, bool, error)

	// Renew extends this client's unexpired lease on key to ttl from now. It
	// returns an error wrapping ErrLockLost when the lease has expired or
	// belongs to another client; it never revives an expired lease.
	Renew(ctx context.Context, key string, ttl time.Duration) error

	// Release gives up this client's lease on key. It returns an error
	// wrapping ErrLockLost when the lease belongs to another client or no
	// longer exists.
	Release(ctx context.Context, key string) error

	// Close releases this client's leases that it does not currently hold
	// (left behind, for example, by a release that failed) and refuses later
	// Acquire calls with an error wrapping ErrClosed. Renew and Release keep
	// working so that locks held at Close can still be unlocked.
	Close(ctx context.Context) error
}

// A Queue is a [Repository] that serves waiting clients in the order they
// began to wait, so that no client starves and a client that releases a
// lease and asks again at once does not overtake those already waiting. A
// registry waiting for a lease calls AcquireOrWait instead of Acquire, and
// Leave when it stops waiting without the lease.
type Queue interface {
	Repository

	// AcquireOrWait is Acquire that, when it does not take the lease, puts
	// this client in key's queue or keeps its place there. A place lapses
	// unless renewed by further calls.
	AcquireOrWait(ctx context.Context, key string, ttl time.Duration) (Lease, bool, error)

	// Leave takes this client out of key's queue.
	Leave(ctx context.Context, key string) error
}

// A HandOffQueue is a [Queue] whose releases hand the lease directly to
// the first waiter, so that the waiter, woken by a [Notifier], only has to
// read it, or not even that when the announcement carried it (jdbc on
// PostgreSQL). A registry woken by an announcement calls HandedLease before
// it asks again.
type HandOffQueue interface {
	Queue

	// HandedLease reports whether this client holds an unexpired lease on
	// key that it did not acquire itself (a release handed it over), and
	// returns it; it takes nothing.
	HandedLease(ctx context.Context, key string) (Lease, bool, error)
}

// A Notifier is a [Repository] that announces released leases, so that a
// client waiting in another process tries again at once instead of after
// its idle interval. Announcements are hints: one that is lost costs
// latency, never correctness, because waiters keep polling. A waiter
// subscribes after its first attempt fails and then asks once more, since a
// release in between would go unheard; the next waiter of a key found held
// the last time subscribes before its first attempt and so asks once.
type Notifier interface {
	Repository

	// Notify arranges for c to receive a value, sent without blocking,
	// whenever key's lease may have become free, until stop is called.
	Notify(key string, c chan<- struct{}) (stop func())
}

// A Checker is a [Repository] that can tell whether it can serve leases,
// for readiness probes ([Registry.Check]).
type Checker interface {
	// Check returns nil when the storage is reachable and usable (for a
	// SQL table: it exists with the columns needed), and otherwise why
	// not; an error wrapping [ErrListenerDown] when only the notifications
	// are down. It does a few round trips at most and changes nothing.
	Check(ctx context.Context) error
}

// A Describer is a [Repository] that says what it is, so that a registry's
// metrics, spans and logs can name its backend, region and client. A
// registry on a repository that is no Describer reports backend "other".
type Describer interface {
	Describe() Description
}

// Description is what a [Describer] says of itself. Every field may be
// empty but Backend.
type Description struct {
	// Backend names the storage, in lower case: "postgresql", "mysql",
	// "sqlite", "redis", "local" (NewLocalRepository)...
	Backend string
	// Region partitions the storage, if it has regions.
	Region string
	// Client is the repository's client id, the identity its leases
	// are held under.
	Client string
}

// A Lease describes a lease that [Repository.Acquire] took.
type Lease struct {
	// Token is the lease's fencing token: greater than the token of every
	// earlier lease on the same key, whoever held it. Storage that guards
	// writes with it (only write if the stored token is not greater) refuses
	// a holder that stalled past its lease. Zero means the repository
	// issues no tokens.
	Token int64

	// TTL, if positive, is how long the lease lasts from when the
	// statement ran: a handed lease has only what remains of it. Zero
	// means the TTL that was asked for.
	TTL time.Duration
}

package redislock

// The waiter queue's calls (registry.Queue and registry.HandOffQueue): a
// waiter keeps its place with AcquireOrWait, takes a lease a release
// handed it with HandedLease, and gives up its place with Leave.

import (
	"context"
	"fmt"
	"time"

	"github.com/lockreg/lockreg/registry"
)

// AcquireOrWait is Acquire that, when it does not take the lease, puts
// this client in key's queue, or keeps its place there, for WithQueueTTL;
// taking the lease leaves the queue. It is still one script, one round
// trip. Waiters are served in the order they began to wait: Acquire takes
// a free lease only when no live waiter of another client is ahead, and
// Release hands the lease to the first live waiter and wakes it (see
// HandedLease), so a client that releases and asks again at once queues
// behind the others.
func (r *Repository) AcquireOrWait(ctx context.Context, key string, ttl time.Duration) (registry.Lease, bool, error) {
	return r.take(ctx, key, ttl, true)
}

// HandedLease reports whether this client holds an unexpired lease on key,
// one that a release handed it while it waited (see AcquireOrWait), and
// returns it, with its token and what remains of it as its TTL. It takes
// nothing: one script that reads, one round trip.
func (r *Repository) HandedLease(ctx context.Context, key string) (registry.Lease, bool, error) {
	what := opKey("claim", key)
	h, err := r.begin(what, key)
	if err != nil {
		return registry.Lease{}, false, err
	}
	lease, ok, err := r.handed(ctx, key)
	// A claim that finds nothing says nothing of a lease held before.
	r.end(key, h, lease.Token, ok, nil)
	if err != nil {
		return registry.Lease{}, false, wrap(ctx, what, err)
	}
	return lease, ok, nil
}

func (r *Repository) handed(ctx context.Context, key string) (registry.Lease, bool, error) {
	if err := ctx.Err(); err != nil {
		return registry.Lease{}, false, err
	}
	n := keyNames(r.cfg.prefix, r.cfg.region, key)
	start := r.cfg.tel.now()
	res, err := handedScript.Run(ctx, r.c, n.all(), r.cfg.clientID).Int64Slice()
	r.cfg.tel.command(opHanded, start, err)
	switch {
	case err != nil:
		return registry.Lease{}, false, err
	case len(res) == 3 && res[0] == 1 && res[2] > 0:
		return registry.Lease{Token: res[1], TTL: time.Duration(res[2]) * time.Millisecond}, true, nil
	case len(res) == 3 && res[0] == 1, len(res) == 1 && res[0] == 0:
		return registry.Lease{}, false, nil // res[2] <= 0: it expired as the script ran
	}
	return registry.Lease{}, false, fmt.Errorf("the claim script returned %v, want {1, token, pttl} or {0}", res)
}

// Leave takes this client out of key's queue and gives back a lease that a
// release handed it meanwhile, which it does not hold (handing it on to
// the next waiter). It is one script, one round trip.
func (r *Repository) Leave(ctx context.Context, key string) error {
	what := opKey("leave", key)
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	r.mu.Lock()
	giveBack := "1"
	if h := r.leases[key]; h != nil && (h.held || h.acquiring > 0) {
		giveBack = "0"
	}
	r.mu.Unlock()
	n := keyNames(r.cfg.prefix, r.cfg.region, key)
	_, counter := lifetimes(0)
	start := r.cfg.tel.now()
	err := leaveScript.Run(ctx, r.c, n.all(), r.cfg.clientID, giveBack, counter, r.cfg.channel, announcement(key)).Err()
	r.cfg.tel.command(opLeave, start, err)
	if err != nil {
		return wrap(ctx, what, err)
	}
	return nil
}

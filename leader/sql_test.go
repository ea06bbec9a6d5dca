package leader_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockreg/lockreg/internal/testdb"
	"github.com/lockreg/lockreg/jdbc"
	"github.com/lockreg/lockreg/leader"
	"github.com/lockreg/lockreg/registry"
)

// On each SQL backend, three candidates, each an instance with its own
// repository (client) of one region, hand the leadership around by
// yielding: no two terms overlap and the tokens of successive terms
// increase. On PostgreSQL the waiters are woken by the release.
func TestOneCandidateLeadsAtATimeOnEachBackend(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testdb.Backend) {
		region := newRegion(t, db)
		r := newRotation(t, 15)
		for i := range 3 {
			repo, err := db.NewRepository(context.Background(), region)
			if err != nil {
				t.Fatal(err)
			}
			reg := newRegistry(t, repo)
			newCandidate(t, reg, "sql-overlap", append(r.options(i, 0), leader.WithTTL(5*time.Second),
				leader.WithBusyWait(50*time.Millisecond),
				leader.WithErrorHandler(func(err error) { t.Logf("candidate %d: %v", i, err) }))...)
		}
		terms, leaders := r.check()
		t.Logf("%d terms, led by %d candidates", terms, leaders)
	})
}

// waitCounter is a jdbc repository, with all its interfaces, that counts
// the attempts that found the lease held elsewhere.
type waitCounter struct {
	*jdbc.LockRepository
	refused atomic.Int64
}

func (w *waitCounter) count(lease registry.Lease, ok bool, err error) (registry.Lease, bool, error) {
	if err == nil && !ok {
		w.refused.Add(1)
	}
	return lease, ok, err
}

func (w *waitCounter) Acquire(ctx context.Context, key string, ttl time.Duration) (registry.Lease, bool, error) {
	return w.count(w.LockRepository.Acquire(ctx, key, ttl))
}

func (w *waitCounter) AcquireOrWait(ctx context.Context, key string, ttl time.Duration) (registry.Lease, bool, error) {
	return w.count(w.LockRepository.AcquireOrWait(ctx, key, ttl))
}

// On PostgreSQL with a listener, a waiting candidate waits in the
// registry, which the release of a yielding leader wakes: it leads
// although its registry would poll only once an hour.
func TestOnPostgreSQLTheReleaseOfAYieldingLeaderWakesTheNextCandidate(t *testing.T) {
	db := testdb.Postgres(t)
	createTables(t, db)
	region := newRegion(t, db)
	candidate := func(opts ...leader.Option) (*leader.Candidate, *waitCounter) {
		repo, err := db.NewRepository(context.Background(), region)
		if err != nil {
			t.Fatal(err)
		}
		w := &waitCounter{LockRepository: repo}
		reg := newRegistry(t, w, registry.WithIdleBetweenTries(time.Hour))
		return newCandidate(t, reg, "woken", append([]leader.Option{leader.WithTTL(time.Hour)}, opts...)...), w
	}
	a, _ := candidate(leader.WithBusyWait(time.Hour))
	waitLead(t, a)
	b, w := candidate()
	// Refused twice: before and after the registry subscribed to
	// releases; from then on it sleeps until woken, or for an hour.
	eventually(t, "the waiter refused twice", func() bool { return w.refused.Load() >= 2 })
	if err := a.Yield(); err != nil {
		t.Fatal(err)
	}
	waitLead(t, b) // within patience, an hour short of both the TTL and the idle interval
}

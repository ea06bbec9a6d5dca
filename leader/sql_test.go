package leader_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockreg/lockreg/leader"
)

// On each SQL backend, three candidates, each an instance with its own
// repository (client) of one region, hand the leadership around by
// yielding: no two terms overlap and the tokens of successive terms
// increase. On PostgreSQL the waiters are woken by the release.
func TestOneCandidateLeadsAtATimeOnEachBackend(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		const terms = 15
		region := newRegion(t, db)
		var (
			active  atomic.Int32
			mu      sync.Mutex
			tokens  []int64
			leaders = map[int]bool{}
			enough  = make(chan struct{})
			once    sync.Once
		)
		for i := range 3 {
			repo, err := newRepository(db.db, db.dialect, region)
			if err != nil {
				t.Fatal(err)
			}
			reg := newRegistry(t, repo)
			newCandidate(t, reg, "sql-overlap", leader.WithTTL(5*time.Second), leader.WithBusyWait(50*time.Millisecond),
				leader.WithErrorHandler(func(err error) { t.Logf("candidate %d: %v", i, err) }),
				leader.OnGranted(func(term *leader.Term) {
					if n := active.Add(1); n != 1 {
						t.Errorf("candidate %d granted while %d others lead", i, n-1)
					}
					mu.Lock()
					tokens = append(tokens, term.Token())
					leaders[i] = true
					if len(tokens) == terms {
						once.Do(func() { close(enough) })
					}
					mu.Unlock()
					term.Yield()
				}),
				leader.OnRevoked(func(*leader.Term) { active.Add(-1) }))
		}
		select {
		case <-enough:
		case <-time.After(patience):
			t.Fatal("too few terms")
		}
		mu.Lock()
		defer mu.Unlock()
		for i := 1; i < len(tokens); i++ {
			if tokens[i] <= tokens[i-1] {
				t.Errorf("term %d has token %d, not greater than the previous term's %d", i, tokens[i], tokens[i-1])
			}
		}
		if len(leaders) < 2 {
			t.Errorf("only %d candidate led in %d terms: no hand-over was tested", len(leaders), len(tokens))
		}
		t.Logf("%d terms, led by %d candidates", len(tokens), len(leaders))
	})
}

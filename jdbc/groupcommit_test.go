package jdbc_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockreg/lockreg/jdbc"
	"github.com/lockreg/lockreg/registry"
)

// gatedDB is a database whose first statement that starts with a prefix
// waits at a gate, once armed, so that the calls that arrive meanwhile
// queue for a group commit; it counts the statements by their first
// words. Its repositories must not prepare statements, which would pass
// it by.
type gatedDB struct {
	*sql.DB
	prefix  string
	armed   chan struct{} // closed by the statement that waits
	gate    chan struct{} // closed to let it go on
	mu      sync.Mutex
	arming  bool
	counted map[string]int
}

func newGatedDB(db *sql.DB) *gatedDB { return &gatedDB{DB: db, counted: map[string]int{}} }

// arm makes the next statement that starts with prefix wait at the gate.
func (g *gatedDB) arm(prefix string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.prefix, g.arming = prefix, true
	g.armed, g.gate = make(chan struct{}), make(chan struct{})
}

func (g *gatedDB) see(query string) {
	g.mu.Lock()
	f := strings.Fields(query)
	g.counted[strings.Join(f[:min(3, len(f))], " ")]++
	if len(f) > 3 {
		g.counted[strings.Join(f[:4], " ")]++
	}
	wait := g.arming && strings.HasPrefix(query, g.prefix)
	if wait {
		g.arming = false
		close(g.armed)
	}
	gate := g.gate
	g.mu.Unlock()
	if wait {
		<-gate
	}
}

// count returns how many statements began with the words of prefix.
func (g *gatedDB) count(prefix string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.counted[prefix]
}

func (g *gatedDB) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	g.see(query)
	return g.DB.ExecContext(ctx, query, args...)
}

func (g *gatedDB) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	g.see(query)
	return g.DB.QueryContext(ctx, query, args...)
}

func (g *gatedDB) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	g.see(query)
	return g.DB.QueryRowContext(ctx, query, args...)
}

// The first words of the group commits' statements and of those of one
// key.
const (
	group     = "WITH v AS"
	takeOne   = "UPDATE INT_LOCK l"
	upsert    = "INSERT INTO INT_LOCK"
	expireOne = "UPDATE INT_LOCK SET"
	handOff   = "WITH nx AS"
)

// counts returns how many statements began with each of three prefixes,
// for since.
func (g *gatedDB) counts(a, b, c string) [6]any {
	return [6]any{a, b, c, g.count(a), g.count(b), g.count(c)}
}

// since returns how many statements of each prefix of before were sent
// since counts returned it.
func (g *gatedDB) since(before [6]any) [3]int {
	var d [3]int
	for i := range d {
		d[i] = g.count(before[i].(string)) - before[i+3].(int)
	}
	return d
}

// groupOutcome is the outcome of one call of a group.
type groupOutcome struct {
	key   string
	lease registry.Lease
	ok    bool
	err   error
}

// inGroup runs first and then, while first's statement (which starts with
// prefix) waits at the gate, the calls of keys, which queue; then it lets
// first go on and returns every call's outcome by key.
func inGroup(t *testing.T, g *gatedDB, repo *jdbc.LockRepository, prefix string, first string, keys []string,
	call func(key string) (registry.Lease, bool, error)) map[string]groupOutcome {
	t.Helper()
	g.arm(prefix)
	out := make(chan groupOutcome, len(keys)+1)
	run := func(key string) {
		lease, ok, err := call(key)
		out <- groupOutcome{key, lease, ok, err}
	}
	go run(first)
	<-g.armed
	for _, k := range keys {
		go run(k)
	}
	waitGrouping(t, repo, len(keys))
	close(g.gate)
	got := map[string]groupOutcome{}
	for range len(keys) + 1 {
		o := <-out
		got[o.key] = o
	}
	return got
}

// waitGrouping waits until n calls of repo wait for a group commit.
func waitGrouping(t *testing.T, repo *jdbc.LockRepository, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute) // a hang guard, not a timing assertion
	for jdbc.GroupCommitsWaiting(repo) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d calls wait for a group commit, want %d", jdbc.GroupCommitsWaiting(repo), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// postgresOnly runs test on the PostgreSQL backends, the only ones with
// group commits.
func postgresOnly(t *testing.T, test func(t *testing.T, db testDB)) {
	forEachDBWhere(t, func(db testDB) bool { return db.Dialect == jdbc.Postgres }, test)
}

// known returns a repository on g that has taken and released each key,
// and the tokens it had.
func known(t *testing.T, g *gatedDB, region string, keys []string) (*jdbc.LockRepository, map[string]int64) {
	t.Helper()
	repo := newRepoOn(t, g, jdbc.WithRegion(region), jdbc.WithoutPreparedStatements())
	tokens := map[string]int64{}
	for _, k := range keys {
		lease, ok, err := repo.Acquire(t.Context(), k, longTTL)
		if err != nil || !ok {
			t.Fatalf("Acquire(%s) = %v, %v", k, ok, err)
		}
		tokens[k] = lease.Token
		if err := repo.Release(t.Context(), k); err != nil {
			t.Fatal(err)
		}
	}
	return repo, tokens
}

func keysN(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%d", i)
	}
	return keys
}

func TestAcquisitionsThatArriveWhileOneIsInFlightShareOneStatement(t *testing.T) {
	postgresOnly(t, func(t *testing.T, db testDB) {
		g := newGatedDB(db.DB)
		keys := keysN(6)
		region := randomRegion()
		repo, tokens := known(t, g, region, keys)
		before := g.counts(group, takeOne, upsert)
		got := inGroup(t, g, repo, takeOne, keys[0], keys[1:], func(k string) (registry.Lease, bool, error) {
			return repo.Acquire(t.Context(), k, longTTL)
		})
		for _, k := range keys {
			if o := got[k]; o.err != nil || !o.ok || o.lease.Token <= tokens[k] {
				t.Errorf("Acquire(%s) = %+v, %v, %v; want the lease with a token above %d", k, o.lease, o.ok, o.err, tokens[k])
			}
			if l := db.MustLease(t, region, k); l.Fence != got[k].lease.Token || l.Holder != repo.Holder() || l.LockName != k {
				t.Errorf("row of %s: FENCE %d, HOLDER %q, LOCK_NAME %q; want %d, %q, %q", k, l.Fence, l.Holder, l.LockName,
					got[k].lease.Token, repo.Holder(), k)
			}
		}
		if sent := g.since(before); sent != [3]int{1, 1, 0} {
			t.Errorf("sent %d group statements, %d takes and %d upserts; want the first acquisition's take, "+
				"and one group statement for the 5 that waited", sent[0], sent[1], sent[2])
		}
	})
}

func TestReleasesThatArriveWhileOneIsInFlightShareOneStatement(t *testing.T) {
	postgresOnly(t, func(t *testing.T, db testDB) {
		g := newGatedDB(db.DB)
		region := randomRegion()
		keys := keysN(6)
		repo, _ := known(t, g, region, keys)
		for _, k := range keys {
			mustAcquire(t, repo, k, longTTL)
		}
		before := g.counts(group, expireOne, handOff)
		got := inGroup(t, g, repo, expireOne, keys[0], keys[1:], func(k string) (registry.Lease, bool, error) {
			return registry.Lease{}, true, repo.Release(t.Context(), k)
		})
		for _, k := range keys {
			if o := got[k]; o.err != nil {
				t.Errorf("Release(%s) = %v", k, o.err)
			}
		}
		if sent := g.since(before); sent != [3]int{1, 1, 0} {
			t.Errorf("sent %d group statements, %d expiries and %d hand-off statements; want the first release's expiry, "+
				"and one group statement for the 5 that waited", sent[0], sent[1], sent[2])
		}
		other := newRepo(t, db, jdbc.WithRegion(region))
		for _, k := range keys {
			mustAcquire(t, other, k, longTTL) // released indeed
		}
	})
}

// A key of a group that another client holds now is left to the
// statements of one key, which find it held.
func TestAGroupLeavesAKeyHeldElsewhereToItsOwnStatement(t *testing.T) {
	postgresOnly(t, func(t *testing.T, db testDB) {
		g := newGatedDB(db.DB)
		region := randomRegion()
		keys := keysN(4)
		repo, _ := known(t, g, region, keys)
		other := newRepo(t, db, jdbc.WithRegion(region))
		mustAcquire(t, other, keys[2], longTTL)
		got := inGroup(t, g, repo, takeOne, keys[0], keys[1:], func(k string) (registry.Lease, bool, error) {
			return repo.Acquire(t.Context(), k, longTTL)
		})
		for _, k := range keys {
			want := k != keys[2]
			if o := got[k]; o.err != nil || o.ok != want {
				t.Errorf("Acquire(%s) = %v, %v; want %v", k, o.ok, o.err, want)
			}
		}
	})
}

// A group waits for no row lock: a key whose row another transaction is
// writing is left to its own statement, which waits for it, while the
// group's other keys are done.
func TestAGroupWaitsForNoRowLock(t *testing.T) {
	postgresOnly(t, func(t *testing.T, db testDB) {
		g := newGatedDB(db.DB)
		region := randomRegion()
		keys := keysN(4)
		repo, _ := known(t, g, region, keys)
		blocker, unblock := db.blockRow(t, table, region, jdbc.UUIDKey(keys[2]))
		g.arm(takeOne)
		out := make(chan groupOutcome, len(keys))
		run := func(k string) {
			_, ok, err := repo.Acquire(t.Context(), k, longTTL)
			out <- groupOutcome{key: k, ok: ok, err: err}
		}
		go run(keys[0])
		<-g.armed
		for _, k := range keys[1:] {
			go run(k)
		}
		waitGrouping(t, repo, len(keys)-1)
		close(g.gate)
		for range len(keys) - 1 { // all but the blocked key, which waits
			if o := <-out; o.key == keys[2] || o.err != nil || !o.ok {
				t.Errorf("Acquire(%s) = %v, %v before the row lock was released; want the lease", o.key, o.ok, o.err)
			}
		}
		db.waitBlocked(t, blocker)
		unblock()
		if o := <-out; o.key != keys[2] || o.err != nil || !o.ok {
			t.Errorf("Acquire(%s) = %v, %v after the row lock was released; want the lease", o.key, o.ok, o.err)
		}
	})
}

// With WithGroupCommit(-1) every acquisition sends statements of its own.
func TestWithoutGroupCommitsEveryKeyHasItsOwnStatement(t *testing.T) {
	postgresOnly(t, func(t *testing.T, db testDB) {
		g := newGatedDB(db.DB)
		region := randomRegion()
		keys := keysN(4)
		repo := newRepoOn(t, g, jdbc.WithRegion(region), jdbc.WithoutPreparedStatements(), jdbc.WithGroupCommit(-1))
		for _, k := range keys {
			mustAcquire(t, repo, k, longTTL)
			if err := repo.Release(t.Context(), k); err != nil {
				t.Fatal(err)
			}
		}
		var wg sync.WaitGroup
		for _, k := range keys {
			wg.Go(func() { mustAcquire(t, repo, k, longTTL) })
		}
		wg.Wait()
		if n := g.count(group); n != 0 {
			t.Errorf("%d group statements, want none", n)
		}
	})
}

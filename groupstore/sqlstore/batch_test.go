package sqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockreg/lockreg/groupstore"
	"github.com/lockreg/lockreg/groupstore/sqlstore"
	"github.com/lockreg/lockreg/internal/testdb"
)

// gateDB, once armed, holds the first Add statement until open is closed,
// and counts the Add statements: alone (AddMessage) and batched (AddBatch).
type gateDB struct {
	*sql.DB
	armed         atomic.Bool
	held, open    chan struct{}
	once          sync.Once
	alone, shared atomic.Int32
	failShared    atomic.Int32 // batched statements still to fail
}

func newGateDB(db *sql.DB) *gateDB {
	return &gateDB{DB: db, held: make(chan struct{}), open: make(chan struct{})}
}

func (g *gateDB) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if g.armed.Load() && isAloneAdd(query) {
		g.alone.Add(1)
		g.once.Do(func() {
			close(g.held)
			<-g.open
		})
	}
	return g.DB.QueryRowContext(ctx, query, args...)
}

// isAloneAdd tells PostgreSQL's Add of one message (AddInPlace or
// AddMessage) by the start of its text.
func isAloneAdd(query string) bool {
	return strings.HasPrefix(query, "WITH g AS (UPDATE") || strings.HasPrefix(query, "WITH l AS")
}

var errShared = errors.New("the batched statement failed")

func (g *gateDB) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if strings.HasPrefix(query, "WITH i AS") {
		g.shared.Add(1)
		if g.failShared.Add(-1) >= 0 {
			return nil, errShared
		}
	}
	return g.DB.QueryContext(ctx, query, args...)
}

// addCall is one Add of batched.
type addCall struct {
	key     string
	msg     groupstore.Message
	timeout time.Duration
	probe   *groupstore.Probe

	g       groupstore.Group
	outcome groupstore.Outcome
	fits    bool
	err     error
}

// batched runs the Add of a message to group "first" and, while its
// statement is held, calls, so that they wait for a group commit
// together; it returns once all have returned.
func batched(t *testing.T, s *sqlstore.Store, gate *gateDB, calls ...*addCall) {
	t.Helper()
	ctx := context.Background()
	gate.armed.Store(true)
	var wg sync.WaitGroup
	wg.Go(func() {
		if _, _, err := s.Add(ctx, "first", groupstore.Message{UUID: "first"}, 0); err != nil {
			t.Errorf("Add first: %v", err)
		}
	})
	<-gate.held
	for _, c := range calls {
		wg.Go(func() {
			if c.probe != nil {
				c.g, c.outcome, c.fits, c.err = s.AddProbe(ctx, c.key, c.msg, c.timeout, *c.probe)
			} else {
				c.g, c.outcome, c.err = s.Add(ctx, c.key, c.msg, c.timeout)
			}
		})
	}
	testdb.WaitFor(t, "the Adds to wait for a group commit", func() bool { return sqlstore.QueuedAdds(s) == len(calls) })
	close(gate.open)
	wg.Wait()
}

// forEachBatcher runs test on the backends whose Adds are group-committed
// (PostgreSQL), on a store of the gated db with GroupCommit 1.
func forEachBatcher(t *testing.T, test func(t *testing.T, s *sqlstore.Store, gate *gateDB)) {
	testdb.ForEachWhere(t, func(b testdb.Backend) bool { return b.Dialect == "postgres" }, func(t *testing.T, db testdb.Backend) {
		gate := newGateDB(db.DB)
		test(t, newStore(t, gate, sqlstore.Config{GroupCommit: 1}), gate)
	})
}

func TestAddsThatWaitShareOneStatementOneMessagePerGroup(t *testing.T) {
	forEachBatcher(t, func(t *testing.T, s *sqlstore.Store, gate *gateDB) {
		var calls []*addCall
		for _, k := range []string{"a", "b", "c", "d", "a"} {
			calls = append(calls, &addCall{key: k, msg: groupstore.Message{UUID: k + "-" + string(rune('0'+len(calls)))}})
		}
		batched(t, s, gate, calls...)
		for _, c := range calls {
			if c.err != nil || c.outcome != groupstore.Added {
				t.Errorf("Add %s to %s = %v, %v; want Added", c.msg.UUID, c.key, c.outcome, c.err)
			}
		}
		// first alone, a b c d together, then the second message of a alone.
		if a, b := gate.alone.Load(), gate.shared.Load(); a != 2 || b != 1 {
			t.Errorf("%d statements alone and %d shared; want 2 and 1", a, b)
		}
		if g, err := s.Get(context.Background(), "a"); err != nil || g.Size != 2 {
			t.Errorf("group a: %d messages, %v; want 2", g.Size, err)
		}
	})
}

func TestABatchedAddReportsItsOwnOutcome(t *testing.T) {
	forEachBatcher(t, func(t *testing.T, s *sqlstore.Store, gate *gateDB) {
		ctx := context.Background()
		for _, m := range []struct{ key, id string }{{"open", "o1"}, {"done", "d1"}} {
			if _, _, err := s.Add(ctx, m.key, groupstore.Message{UUID: m.id}, 0); err != nil {
				t.Fatal(err)
			}
		}
		done, err := s.Get(ctx, "done")
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Update(ctx, "done", groupstore.Update{IfVersion: done.Version, ReleaseAll: true, Complete: true}); err != nil {
			t.Fatal(err)
		}
		twin := probeFor(1, 2)
		calls := []*addCall{
			{key: "open", msg: groupstore.Message{UUID: "o1"}},                    // a redelivery
			{key: "done", msg: groupstore.Message{UUID: "d2"}},                    // late
			{key: "new", msg: groupstore.Message{UUID: "n1"}, timeout: time.Hour}, // a new group that falls due
			{key: "seq", msg: seqMessage("s2", "1", "2"), probe: &twin},           // fits the empty group
		}
		if _, _, err := s.Add(ctx, "seq", seqMessage("s1", "1", "2"), 0); err != nil { // the twin of s2
			t.Fatal(err)
		}
		batched(t, s, gate, calls...)
		want := []groupstore.Outcome{groupstore.Duplicate, groupstore.Rejected, groupstore.Added, groupstore.Added}
		for i, c := range calls {
			if c.err != nil || c.outcome != want[i] {
				t.Errorf("Add %s to %s = %v, %v; want %v", c.msg.UUID, c.key, c.outcome, c.err, want[i])
			}
		}
		if gate.shared.Load() != 1 {
			t.Fatalf("%d shared statements, want 1", gate.shared.Load())
		}
		if c := calls[2]; c.g.Size != 1 || c.g.Version != 1 {
			t.Errorf("the new group as Add returned it: size %d, version %d; want 1, 1", c.g.Size, c.g.Version)
		}
		if g, err := s.Get(ctx, "new"); err != nil || g.Due.IsZero() {
			t.Errorf("the new group's due time: %v, %v; want one", g.Due, err)
		}
		if calls[3].fits {
			t.Error("s2 fits a group that holds its twin s1")
		}
	})
}

func TestAFailedSharedStatementRunsEachAddAlone(t *testing.T) {
	forEachBatcher(t, func(t *testing.T, s *sqlstore.Store, gate *gateDB) {
		gate.failShared.Store(1)
		calls := []*addCall{{key: "a", msg: groupstore.Message{UUID: "a1"}}, {key: "b", msg: groupstore.Message{UUID: "b1"}}}
		batched(t, s, gate, calls...)
		for _, c := range calls {
			if c.err != nil || c.outcome != groupstore.Added {
				t.Errorf("Add %s = %v, %v; want Added", c.msg.UUID, c.outcome, c.err)
			}
		}
		if a, b := gate.alone.Load(), gate.shared.Load(); a != 3 || b != 1 {
			t.Errorf("%d statements alone and %d shared; want 3 (first, a, b) and 1", a, b)
		}
	})
}

func TestAnAddWhoseContextEndsWhileItWaitsAddsNothing(t *testing.T) {
	forEachBatcher(t, func(t *testing.T, s *sqlstore.Store, gate *gateDB) {
		ctx := context.Background()
		gate.armed.Store(true)
		var wg sync.WaitGroup
		wg.Go(func() { s.Add(ctx, "first", groupstore.Message{UUID: "first"}, 0) })
		<-gate.held
		cctx, cancel := context.WithCancel(ctx)
		errc := make(chan error, 1)
		go func() {
			_, _, err := s.Add(cctx, "gone", groupstore.Message{UUID: "g1"}, 0)
			errc <- err
		}()
		testdb.WaitFor(t, "the Add to wait", func() bool { return sqlstore.QueuedAdds(s) == 1 })
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Errorf("Add = %v, want context.Canceled", err)
		}
		close(gate.open)
		wg.Wait()
		if _, err := s.Get(ctx, "gone"); !errors.Is(err, groupstore.ErrNotFound) {
			t.Errorf("Get of its group = %v, want ErrNotFound", err)
		}
	})
}

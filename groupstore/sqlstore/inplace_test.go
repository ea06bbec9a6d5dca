package sqlstore_test

import (
	"context"
	"testing"

	"github.com/lockreg/lockreg/groupstore"
	"github.com/lockreg/lockreg/groupstore/sqlstore"
	"github.com/lockreg/lockreg/internal/testdb"
	"github.com/lockreg/lockreg/jdbc"
)

// PostgreSQL's Add creates a group its snapshot does not have with a plain
// INSERT; when another instance's transaction creates the group first, the
// INSERT fails on the primary key and the Add must then add the message
// to that group, not fail. The other instance's transaction holds the new
// row (a Locked call whose Add created the group) until the Add waits for
// it.
func TestAnAddWhoseGroupAnotherInstanceCreatesMeanwhileJoinsIt(t *testing.T) {
	testdb.ForEachWhere(t, func(b testdb.Backend) bool { return b.Dialect == jdbc.Postgres }, func(t *testing.T, db testdb.Backend) {
		ctx := context.Background()
		region := testdb.RandomRegion()
		s, other := newStore(t, db.DB, sqlstore.Config{Region: region}), newStore(t, db.DB, sqlstore.Config{Region: region})
		type result struct {
			o   groupstore.Outcome
			err error
		}
		added := make(chan result, 1)
		err := s.Locked(ctx, "k", func(ctx context.Context, tx groupstore.Store) error {
			if _, _, err := tx.Add(ctx, "k", groupstore.Message{UUID: "m1"}, 0); err != nil {
				return err
			}
			go func() {
				_, o, err := other.Add(ctx, "k", groupstore.Message{UUID: "m2"}, 0)
				added <- result{o, err}
			}()
			waitForALockWait(ctx, t, db.DB)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if r := <-added; r.err != nil || r.o != groupstore.Added {
			t.Fatalf("the Add that met the new group = %v, %v; want Added", r.o, r.err)
		}
		g, err := s.Get(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		if len(g.Messages) != 2 || g.Messages[0].UUID != "m1" || g.Messages[1].UUID != "m2" {
			t.Errorf("group holds %v; want m1, m2 in that order", g.Messages)
		}
	})
}

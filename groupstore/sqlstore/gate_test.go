package sqlstore_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/lockreg/lockreg/groupstore"
	"github.com/lockreg/lockreg/groupstore/sqlstore"
	"github.com/lockreg/lockreg/internal/testdb"
)

// An Add to a group that a Locked call of the same store holds waits for
// it without a connection, so that the Locked call can still use one of
// the pool's (a publisher on the same database, say): with a pool of two,
// and as many Adds in flight as connections, the Add would otherwise hold
// the second one while it waited for the row lock.
func TestAnAddToAGroupUnderLockedLeavesThePoolToIt(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, b testdb.Backend) {
		db := testdb.OpenPool(t, b.Driver, b.DSN)
		db.SetMaxOpenConns(2)
		s := newStore(t, db, sqlstore.Config{Dialect: b.Dialect})
		// Not a timing assertion: a deadline for a hang, which is the bug.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, _, err := s.Add(ctx, "g", groupstore.Message{UUID: "m1"}, 0); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var addErr error
		err := s.Locked(ctx, "g", func(ctx context.Context, tx groupstore.Store) error {
			if _, err := tx.Get(ctx, "g"); err != nil { // takes the row lock
				return err
			}
			wg.Go(func() { _, _, addErr = s.Add(ctx, "g", groupstore.Message{UUID: "m2"}, 0) })
			testdb.WaitFor(t, "the Add to wait for the Locked call", func() bool { return sqlstore.GatedAdds(s) == 1 })
			var one int
			return db.QueryRowContext(ctx, "SELECT 1").Scan(&one) // the pool's other connection
		})
		if err != nil {
			t.Fatalf("Locked: %v", err)
		}
		wg.Wait()
		if addErr != nil {
			t.Fatalf("Add after Locked: %v", addErr)
		}
		if g, err := s.Get(ctx, "g"); err != nil || g.Size != 2 {
			t.Errorf("group: %d messages, %v; want 2", g.Size, err)
		}
	})
}

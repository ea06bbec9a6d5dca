package sqlstore_test

import (
	"context"
	"slices"
	"testing"

	"github.com/lockreg/lockreg/groupstore"
	"github.com/lockreg/lockreg/groupstore/sqlstore"
	"github.com/lockreg/lockreg/internal/testdb"
	"github.com/lockreg/lockreg/jdbc"
)

func isPostgres(b testdb.Backend) bool { return b.Dialect == jdbc.Postgres }

// uuids are the UUIDs of g's messages in their order.
func uuids(g groupstore.Group) []string {
	var ids []string
	for _, m := range g.Messages {
		ids = append(ids, m.UUID)
	}
	return ids
}

// On PostgreSQL a Locked call's first Get locks the group and reads it in
// one statement, whose snapshot misses what committed while it waited for
// the lock: it must read the group again then.
func TestALockedGetReadsAnAddThatCommittedWhileItWaited(t *testing.T) {
	testdb.ForEachWhere(t, isPostgres, func(t *testing.T, db testdb.Backend) {
		ctx := context.Background()
		s := newStore(t, db.DB, sqlstore.Config{})
		if _, _, err := s.Add(ctx, "k", groupstore.Message{UUID: "m0"}, 0); err != nil {
			t.Fatal(err)
		}
		read := make(chan groupstore.Group, 1)
		err := s.Locked(ctx, "k", func(ctx context.Context, tx groupstore.Store) error {
			if _, _, err := tx.Add(ctx, "k", groupstore.Message{UUID: "m1"}, 0); err != nil {
				return err
			}
			go func() {
				var g groupstore.Group
				err := s.Locked(ctx, "k", func(ctx context.Context, tx groupstore.Store) error {
					var err error
					g, err = tx.Get(ctx, "k")
					return err
				})
				if err != nil {
					t.Error(err)
				}
				read <- g
			}()
			waitForALockWait(ctx, t, db.DB)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		g := <-read
		if ids := uuids(g); !slices.Equal(ids, []string{"m0", "m1"}) || g.Size != 2 || g.Version != 2 {
			t.Errorf("the Get that waited read %v, size %d, version %d; want [m0 m1], 2, 2", ids, g.Size, g.Version)
		}
	})
}

// A group's release under its lock, the handlers' step that completes a
// group, is BEGIN, the Get that locks, the Update that releases and
// COMMIT on PostgreSQL.
func TestALockedReleaseTakesFourRoundTripsOnPostgres(t *testing.T) {
	s, statements := testdb.CountingStore(t)
	ctx := context.Background()
	for _, id := range []string{"m0", "m1", "m2"} {
		if _, _, err := s.Add(ctx, "k", groupstore.Message{UUID: id}, 0); err != nil {
			t.Fatal(err)
		}
	}
	before := statements.N()
	err := s.Locked(ctx, "k", func(ctx context.Context, tx groupstore.Store) error {
		g, err := tx.Get(ctx, "k")
		if err != nil {
			return err
		}
		return tx.Update(ctx, "k", groupstore.Update{IfVersion: g.Version, Release: []string{"m0", "m2"}})
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := statements.N() - before; n != 4 {
		t.Errorf("the release sent %d statements, want 4", n)
	}
	g, err := s.Get(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if ids := uuids(g); !slices.Equal(ids, []string{"m1"}) || g.Size != 1 || g.Releases != 1 || g.Version != 4 {
		t.Errorf("after the release: %v, size %d, releases %d, version %d; want [m1], 1, 1, 4", ids, g.Size, g.Releases, g.Version)
	}
}

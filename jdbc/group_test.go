package jdbc_test

import (
	"context"
	"errors"
	"testing"

	"github.com/lockreg/lockreg/groupstore"
	"github.com/lockreg/lockreg/groupstore/groupstoretest"
	"github.com/lockreg/lockreg/jdbc"
)

// newGroupStore returns a group store on db in a region of its own.
func newGroupStore(t testing.TB, db testDB, opts ...jdbc.Option) *jdbc.GroupStore {
	t.Helper()
	s, err := jdbc.NewGroupStore(db.DB, append([]jdbc.Option{jdbc.WithRegion(randomRegion())}, opts...)...)
	if err != nil {
		t.Fatalf("NewGroupStore: %v", err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

func TestGroupStoreConformance(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		if db.Name == "postgres-pq" && testing.Short() {
			t.Skip("short: pgx covers PostgreSQL")
		}
		groupstoretest.Run(t, func(t *testing.T) groupstore.Store { return newGroupStore(t, db) })
	})
}

func TestGroupStoresInDifferentRegionsDoNotShareGroups(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		ctx := context.Background()
		a, b := newGroupStore(t, db), newGroupStore(t, db)
		if _, _, err := a.Add(ctx, "k", groupstore.Message{UUID: "m1"}, 0); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Get(ctx, "k"); !errors.Is(err, groupstore.ErrNotFound) {
			t.Errorf("the other region's Get = %v, want ErrNotFound", err)
		}
		if _, o, err := b.Add(ctx, "k", groupstore.Message{UUID: "m1"}, 0); err != nil || o != groupstore.Added {
			t.Errorf("the other region's Add = %v, %v", o, err)
		}
	})
}

func TestGroupStoreWithAPrefixWithoutTablesReportsErrNoTable(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		s := newGroupStore(t, db, jdbc.WithPrefix("NOPE_"))
		_, _, err := s.Add(context.Background(), "k", groupstore.Message{UUID: "m1"}, 0)
		if !errors.Is(err, jdbc.ErrNoTable) {
			t.Errorf("Add without tables = %v, want ErrNoTable", err)
		}
	})
}

func TestNewGroupStoreChecksOptions(t *testing.T) {
	db := testDatabases(t)[3] // sqlite
	if _, err := jdbc.NewGroupStore(db.DB, jdbc.WithPrefix("bad prefix")); !errors.Is(err, jdbc.ErrInvalidOption) {
		t.Errorf("bad prefix: %v", err)
	}
	if _, err := jdbc.NewGroupStore(nil); err == nil {
		t.Error("nil db accepted")
	}
}

package jdbc_test

import (
	"errors"
	"testing"

	"github.com/lockreg/lockreg/jdbc"
)

func newAdmin(t *testing.T, db testDB) *jdbc.Admin {
	t.Helper()
	a, err := jdbc.NewAdmin(db.DB)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func names(ls []jdbc.LeaseInfo) []string {
	var out []string
	for _, l := range ls {
		out = append(out, l.Name)
	}
	return out
}

func TestAdminListsLeasesByRegionStateAndNamePrefix(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		region := randomRegion()
		repo := newRepo(t, db, jdbc.WithRegion(region), jdbc.WithApplicationName("billing"))
		for _, k := range []string{"orders/1", "orders/2", "users/1", "orders_x"} {
			mustAcquire(t, repo, k, longTTL)
		}
		if err := repo.Release(t.Context(), "orders/2"); err != nil {
			t.Fatal(err)
		}
		a := newAdmin(t, db)
		for _, c := range []struct {
			f    jdbc.LeaseFilter
			want []string
		}{
			{jdbc.LeaseFilter{Region: region}, []string{"orders/1", "orders/2", "orders_x", "users/1"}},
			{jdbc.LeaseFilter{Region: region, State: jdbc.HeldLeases}, []string{"orders/1", "orders_x", "users/1"}},
			{jdbc.LeaseFilter{Region: region, State: jdbc.ExpiredLeases}, []string{"orders/2"}},
			{jdbc.LeaseFilter{Region: region, NamePrefix: "orders/"}, []string{"orders/1", "orders/2"}},
			{jdbc.LeaseFilter{Region: region, Limit: 1}, []string{"orders/1"}},
			{jdbc.LeaseFilter{Region: randomRegion()}, nil},
		} {
			got, err := a.Leases(t.Context(), c.f)
			if err != nil {
				t.Fatal(err)
			}
			if g := names(got); len(g) != len(c.want) || (len(g) > 0 && !equal(g, c.want)) {
				t.Errorf("Leases(%+v) = %v, want %v", c.f, g, c.want)
			}
		}
	})
}

func equal(a, b []string) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return len(a) == len(b)
}

func TestAdminShowsOneLeaseWithItsHolder(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		region := randomRegion()
		repo := newRepo(t, db, jdbc.WithRegion(region), jdbc.WithApplicationName("billing"))
		lease, ok, err := repo.Acquire(t.Context(), "orders/1", longTTL)
		if !ok || err != nil {
			t.Fatal(ok, err)
		}
		a := newAdmin(t, db)
		got, found, err := a.Lease(t.Context(), region, "orders/1")
		if err != nil || !found {
			t.Fatal(found, err)
		}
		row := db.MustLease(t, region, "orders/1")
		if got.Name != "orders/1" || got.LockKey != jdbc.UUIDKey("orders/1") || got.ClientID != repo.ClientID() ||
			got.Holder != repo.Holder() || got.Token != lease.Token || !got.Held || got.Region != region ||
			got.Expires.UnixMicro() != row.Expires || !got.Created.Equal(row.Created) {
			t.Errorf("Lease = %+v; row %+v, client %s", got, row, repo.ClientID())
		}
		if _, found, err := a.Lease(t.Context(), region, "nobody"); found || err != nil {
			t.Errorf("Lease of a key without a row: %v, %v", found, err)
		}
	})
}

// The holder learns of a forced release at its next renewal, and the next
// holder's token is greater.
func TestAdminForceReleaseLetsAnotherClientAcquire(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		region, holder, other := twoClients(t, db)
		first, _, err := holder.Acquire(t.Context(), "k", longTTL)
		if err != nil {
			t.Fatal(err)
		}
		a := newAdmin(t, db)
		if released, err := a.ForceRelease(t.Context(), region, "k"); !released || err != nil {
			t.Fatalf("ForceRelease: %v, %v", released, err)
		}
		if released, err := a.ForceRelease(t.Context(), region, "k"); released || err != nil {
			t.Fatalf("ForceRelease of a released lease: %v, %v; want false, nil", released, err)
		}
		wantLockLost(t, "renew", holder.Renew(t.Context(), "k", longTTL))
		next, ok, err := other.Acquire(t.Context(), "k", longTTL)
		if !ok || err != nil {
			t.Fatalf("Acquire after the forced release: %v, %v", ok, err)
		}
		if next.Token <= first.Token {
			t.Errorf("token %d after the forced release, not above %d", next.Token, first.Token)
		}
	})
}

func TestAdminListsPostgresWaitersInServingOrder(t *testing.T) {
	forEachPostgres(t, func(t *testing.T, db testDB, l jdbc.Listener) {
		region := randomRegion()
		holder := newRepo(t, db, jdbc.WithRegion(region))
		w1 := newRepo(t, db, jdbc.WithRegion(region), jdbc.WithListener(l), jdbc.WithQueueTTL(longTTL), jdbc.WithApplicationName("w1"))
		w2 := newRepo(t, db, jdbc.WithRegion(region), jdbc.WithListener(l), jdbc.WithQueueTTL(longTTL), jdbc.WithApplicationName("w2"))
		mustAcquire(t, holder, "k", longTTL)
		for _, w := range []*jdbc.LockRepository{w1, w2} {
			if _, ok, err := w.AcquireOrWait(t.Context(), "k", longTTL); ok || err != nil {
				t.Fatal(ok, err)
			}
		}
		got, err := newAdmin(t, db).Waiters(t.Context(), region)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 || got[0].ClientID != w1.ClientID() || got[1].ClientID != w2.ClientID() ||
			got[0].Holder != w1.Holder() || got[0].Name != "k" || got[0].Since.After(got[1].Since) {
			t.Errorf("Waiters = %+v; want w1 (%s) then w2 (%s)", got, w1.ClientID(), w2.ClientID())
		}
	})
}

func TestAdminWaitersElsewhereIsUnsupported(t *testing.T) {
	// Not on PostgreSQL, which has the queue (TestAdminListsPostgresWaitersInServingOrder).
	forEachDBWhere(t, func(db testDB) bool { return db.Dialect != jdbc.Postgres }, func(t *testing.T, db testDB) {
		if _, err := newAdmin(t, db).Waiters(t.Context(), ""); !errors.Is(err, errors.ErrUnsupported) {
			t.Fatalf("got %v, want errors.ErrUnsupported", err)
		}
	})
}

func TestAdminOfAMissingTableIsErrNoTable(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		a, err := jdbc.NewAdmin(db.DB, jdbc.WithPrefix("NOSUCH_"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.Leases(t.Context(), jdbc.LeaseFilter{}); !errors.Is(err, jdbc.ErrNoTable) {
			t.Fatalf("got %v, want jdbc.ErrNoTable", err)
		}
	})
}

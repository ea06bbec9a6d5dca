package jdbc_test

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/lockreg/lockreg/jdbc"
)

// Readable rows: LOCK_NAME holds the key as written, HOLDER who took the
// lease.

func TestAcquireWritesTheKeyAsWrittenAndTheHolderToTheRow(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		region := randomRegion()
		repo := newRepo(t, db, jdbc.WithRegion(region), jdbc.WithApplicationName("billing"))
		mustAcquire(t, repo, "orders/42", longTTL)
		l := db.MustLease(t, region, "orders/42")
		if l.LockName != "orders/42" {
			t.Errorf("LOCK_NAME %q, want %q", l.LockName, "orders/42")
		}
		host, _ := os.Hostname()
		want := "host=" + host + " pid=" + strconv.Itoa(os.Getpid()) + " app=billing"
		if l.Holder != want || repo.Holder() != want {
			t.Errorf("HOLDER %q, Holder() %q; want %q", l.Holder, repo.Holder(), want)
		}
	})
}

func TestTheHolderDefaultsToTheExecutablesName(t *testing.T) {
	repo := newRepo(t, sqliteDB(t))
	if app := " app=" + filepath.Base(os.Args[0]); !strings.HasSuffix(repo.Holder(), app) {
		t.Errorf("Holder() %q does not end in %q", repo.Holder(), app)
	}
}

func TestAnEmptyApplicationNameLeavesTheAppOut(t *testing.T) {
	repo := newRepo(t, sqliteDB(t), jdbc.WithApplicationName(""))
	if h := repo.Holder(); strings.Contains(h, "app=") || !strings.Contains(h, " pid=") {
		t.Errorf("Holder() %q, want host and pid only", h)
	}
}

func TestABadApplicationNameIsAnInvalidOption(t *testing.T) {
	for _, name := range []string{strings.Repeat("a", 101), "a\x00b", "\xff"} {
		_, err := jdbc.NewLockRepository(t.Context(), sqliteDB(t).DB, jdbc.WithApplicationName(name))
		if !errors.Is(err, jdbc.ErrInvalidOption) {
			t.Errorf("WithApplicationName(%q): got %v, want ErrInvalidOption", name, err)
		}
	}
}

func TestAnotherClientsAcquisitionWritesItsHolderAndKeepsTheName(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		region := randomRegion()
		a := newRepo(t, db, jdbc.WithRegion(region), jdbc.WithApplicationName("a"))
		b := newRepo(t, db, jdbc.WithRegion(region), jdbc.WithApplicationName("b"))
		mustAcquire(t, a, "k", longTTL)
		mustNotAcquire(t, b, "k", longTTL)
		if l := db.MustLease(t, region, "k"); l.Holder != a.Holder() {
			t.Fatalf("HOLDER %q after b failed to acquire, want a's %q", l.Holder, a.Holder())
		}
		if err := a.Release(t.Context(), "k"); err != nil {
			t.Fatal(err)
		}
		mustAcquire(t, b, "k", longTTL)
		if l := db.MustLease(t, region, "k"); l.Holder != b.Holder() || l.LockName != "k" {
			t.Errorf("HOLDER %q, LOCK_NAME %q; want %q, %q", l.Holder, l.LockName, b.Holder(), "k")
		}
	})
}

// A row Spring inserted, or lockreg before LOCK_NAME existed, gets its name
// from the first lockreg acquisition.
func TestAnAcquisitionNamesARowThatHasNoName(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		region := randomRegion()
		repo := newRepo(t, db, jdbc.WithRegion(region))
		mustAcquire(t, repo, "k", longTTL)
		if _, err := db.DB.ExecContext(t.Context(), db.Q(`UPDATE INT_LOCK SET LOCK_NAME = NULL WHERE REGION = ?`), region); err != nil {
			t.Fatal(err)
		}
		mustAcquire(t, repo, "k", longTTL)
		if l := db.MustLease(t, region, "k"); l.LockName != "k" {
			t.Errorf("LOCK_NAME %q, want %q", l.LockName, "k")
		}
	})
}

func TestALongKeyIsNamedByItsFirst255Characters(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		region := randomRegion()
		repo := newRepo(t, db, jdbc.WithRegion(region))
		key := strings.Repeat("é", 300)
		mustAcquire(t, repo, key, longTTL)
		if l := db.MustLease(t, region, key); l.LockName != strings.Repeat("é", 255) {
			t.Errorf("LOCK_NAME has %d characters, want the first 255 of the key", len([]rune(l.LockName)))
		}
	})
}

// On PostgreSQL a release hands the lease to the first waiter: the row then
// names the waiter as its holder.
func TestAHandOverWritesTheWaitersHolder(t *testing.T) {
	forEachPostgres(t, func(t *testing.T, db testDB, l jdbc.Listener) {
		region := randomRegion()
		a := newRepo(t, db, jdbc.WithRegion(region), jdbc.WithListener(l), jdbc.WithApplicationName("a"))
		b := longPlacesRepo(t, db, region, l, jdbc.WithApplicationName("b"))
		mustAcquire(t, a, "k", longTTL)
		if _, ok, err := b.AcquireOrWait(t.Context(), "k", longTTL); ok || err != nil {
			t.Fatalf("AcquireOrWait of a held lock: %v, %v", ok, err)
		}
		if err := a.Release(t.Context(), "k"); err != nil {
			t.Fatal(err)
		}
		lease := wantOwner(t, db, region, "k", b)
		if lease.Holder != b.Holder() {
			t.Errorf("HOLDER %q after the hand-over, want b's %q", lease.Holder, b.Holder())
		}
	})
}

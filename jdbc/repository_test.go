package jdbc_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"
	"go.uber.org/goleak"

	"github.com/lockreg/lockreg/internal/testdb"
	"github.com/lockreg/lockreg/jdbc"
	"github.com/lockreg/lockreg/registry"
)

// TestMain fails the package when a test leaves goroutines behind. Every
// pool the tests open is closed by t.Cleanup, so no driver goroutine needs
// ignoring.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	shortTTL = 300 * time.Millisecond // leases the tests let expire
	longTTL  = time.Hour              // leases that must not expire during a test
	table    = "INT_LOCK"
)

// expire sleeps until a lease of shortTTL taken before has expired.
func expire() { time.Sleep(shortTTL + 200*time.Millisecond) }

func acquire(t testing.TB, repo *jdbc.LockRepository, key string, ttl time.Duration) bool {
	t.Helper()
	_, ok, err := repo.Acquire(context.Background(), key, ttl)
	if err != nil {
		t.Fatalf("Acquire(%.40q): %v", key, err)
	}
	return ok
}

func mustAcquire(t testing.TB, repo *jdbc.LockRepository, key string, ttl time.Duration) {
	t.Helper()
	if !acquire(t, repo, key, ttl) {
		t.Fatalf("Acquire(%.40q) = false, want true", key)
	}
}

// mustQueue calls AcquireOrWait on a lease another client holds: it must
// report false, the caller queued.
func mustQueue(t testing.TB, repo *jdbc.LockRepository, key string, ttl time.Duration) {
	t.Helper()
	if _, ok, err := repo.AcquireOrWait(context.Background(), key, ttl); err != nil || ok {
		t.Fatalf("AcquireOrWait(%.40q) of the held lease = %v, %v; want false, nil (queued)", key, ok, err)
	}
}

func mustNotAcquire(t testing.TB, repo *jdbc.LockRepository, key string, ttl time.Duration) {
	t.Helper()
	if acquire(t, repo, key, ttl) {
		t.Fatalf("Acquire(%.40q) = true, want false", key)
	}
}

func wantLockLost(t testing.TB, op string, err error) {
	t.Helper()
	if !errors.Is(err, registry.ErrLockLost) {
		t.Fatalf("%s: got %v, want an error wrapping registry.ErrLockLost", op, err)
	}
}

func wantOwner(t testing.TB, db testDB, region, key string, owner *jdbc.LockRepository) testdb.Lease {
	t.Helper()
	l, ok := db.Lease(t, table, region, jdbc.UUIDKey(key))
	if !ok {
		t.Fatalf("no row for %q", key)
	}
	if l.ClientID != owner.ClientID() {
		t.Fatalf("row of %q belongs to %s, want %s", key, l.ClientID, owner.ClientID())
	}
	return l
}

// wantReleased checks that key's row is gone or expired: released rows stay
// in the table, expired, with their fencing token.
func wantReleased(t testing.TB, db testDB, region, key string) {
	t.Helper()
	if l, ok := db.Lease(t, table, region, jdbc.UUIDKey(key)); ok && l.Remaining > 0 {
		t.Fatalf("row of %q is still leased: %+v", key, l)
	}
}

func wantNoRow(t testing.TB, db testDB, region, key string) {
	t.Helper()
	if l, ok := db.Lease(t, table, region, jdbc.UUIDKey(key)); ok {
		t.Fatalf("row of %q still exists: %+v", key, l)
	}
}

// twoClients returns two repositories (two clients) in one fresh region.
func twoClients(t testing.TB, db testDB) (region string, a, b *jdbc.LockRepository) {
	region = randomRegion()
	return region, newRepo(t, db, jdbc.WithRegion(region)), newRepo(t, db, jdbc.WithRegion(region))
}

// Spring's DefaultLockRepositoryTests, one behaviour per test.

func TestAcquireTakesAFreeLock(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		region := randomRegion()
		repo := newRepo(t, db, jdbc.WithRegion(region))
		mustAcquire(t, repo, "free", longTTL)
		wantOwner(t, db, region, "free", repo)
	})
}

func TestReleaseExpiresTheRow(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		region := randomRegion()
		repo := newRepo(t, db, jdbc.WithRegion(region))
		mustAcquire(t, repo, "k", longTTL)
		if err := repo.Release(t.Context(), "k"); err != nil {
			t.Fatal(err)
		}
		wantReleased(t, db, region, "k")
	})
}

func TestAcquireAgainExtendsTheTTL(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		region, a, b := twoClients(t, db)
		mustAcquire(t, a, "k", shortTTL)
		mustAcquire(t, a, "k", longTTL)
		if l := wantOwner(t, db, region, "k", a); l.Remaining < longTTL/2 {
			t.Fatalf("lease expires in %v, want about %v", l.Remaining, longTTL)
		}
		expire()
		mustNotAcquire(t, b, "k", longTTL)
	})
}

func TestAcquireOfALockHeldByAnotherClientReturnsFalse(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		region, a, b := twoClients(t, db)
		mustAcquire(t, a, "k", longTTL)
		mustNotAcquire(t, b, "k", longTTL)
		wantOwner(t, db, region, "k", a)
	})
}

func TestAcquireTakesOverAnExpiredLease(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		region, a, b := twoClients(t, db)
		mustAcquire(t, a, "k", shortTTL)
		expire()
		mustAcquire(t, b, "k", longTTL)
		if l := wantOwner(t, db, region, "k", b); l.Remaining < longTTL/2 {
			t.Fatalf("the new lease expires in %v, want about %v", l.Remaining, longTTL)
		}
	})
}

func TestRenewExtendsTheLease(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		region, a, b := twoClients(t, db)
		mustAcquire(t, a, "k", shortTTL)
		if err := a.Renew(t.Context(), "k", longTTL); err != nil {
			t.Fatal(err)
		}
		if l := wantOwner(t, db, region, "k", a); l.Remaining < longTTL/2 {
			t.Fatalf("lease expires in %v, want about %v", l.Remaining, longTTL)
		}
		expire()
		mustNotAcquire(t, b, "k", longTTL)
	})
}

func TestRenewAfterExpiryAndDeleteExpiredFails(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		repo := newRepo(t, db)
		mustAcquire(t, repo, "k", shortTTL)
		expire()
		if n, err := repo.DeleteExpired(t.Context()); err != nil || n != 1 {
			t.Fatalf("DeleteExpired = %d, %v; want 1, nil", n, err)
		}
		wantLockLost(t, "Renew", repo.Renew(t.Context(), "k", longTTL))
	})
}

func TestRenewNeverRevivesAnExpiredLease(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		region := randomRegion()
		repo := newRepo(t, db, jdbc.WithRegion(region))
		mustAcquire(t, repo, "k", shortTTL)
		expire()
		wantLockLost(t, "Renew", repo.Renew(t.Context(), "k", longTTL))
		if l := wantOwner(t, db, region, "k", repo); l.Remaining > 0 {
			t.Fatalf("Renew revived the lease: it expires in %v", l.Remaining)
		}
	})
}

func TestRenewOfAnotherClientsLeaseFails(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		region, a, b := twoClients(t, db)
		mustAcquire(t, a, "k", shortTTL)
		wantLockLost(t, "Renew", b.Renew(t.Context(), "k", longTTL))
		if l := wantOwner(t, db, region, "k", a); l.Remaining > shortTTL {
			t.Fatalf("another client's Renew extended the lease to %v", l.Remaining)
		}
	})
}

func TestReleaseOfAnotherClientsLeaseFails(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		region, a, b := twoClients(t, db)
		mustAcquire(t, a, "k", longTTL)
		wantLockLost(t, "Release", b.Release(t.Context(), "k"))
		wantOwner(t, db, region, "k", a)
	})
}

func TestReleaseAfterExpiryAndDeleteExpiredFails(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		repo := newRepo(t, db)
		mustAcquire(t, repo, "k", shortTTL)
		expire()
		if _, err := repo.DeleteExpired(t.Context()); err != nil {
			t.Fatal(err)
		}
		wantLockLost(t, "Release", repo.Release(t.Context(), "k"))
	})
}

func TestReleaseOfOwnExpiredLeaseSucceeds(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		region := randomRegion()
		repo := newRepo(t, db, jdbc.WithRegion(region))
		mustAcquire(t, repo, "k", shortTTL)
		expire()
		if err := repo.Release(t.Context(), "k"); err != nil {
			t.Fatalf("Release of an expired lease nobody took over: %v", err)
		}
		wantReleased(t, db, region, "k")
	})
}

func TestReleaseOfAnExpiredLeaseTakenOverFails(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		region, a, b := twoClients(t, db)
		mustAcquire(t, a, "k", shortTTL)
		expire()
		mustAcquire(t, b, "k", longTTL)
		wantLockLost(t, "Release", a.Release(t.Context(), "k"))
		wantOwner(t, db, region, "k", b)
	})
}

func TestDeleteExpiredDeletesExpiredRowsOfItsRegionOnly(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		region, a, b := twoClients(t, db)
		otherRegion := randomRegion()
		c := newRepo(t, db, jdbc.WithRegion(otherRegion))
		mustAcquire(t, a, "a", shortTTL)
		mustAcquire(t, b, "b", shortTTL)
		mustAcquire(t, b, "live", longTTL)
		mustAcquire(t, c, "c", shortTTL)
		expire()
		n, err := a.DeleteExpired(t.Context())
		if err != nil || n != 2 {
			t.Fatalf("DeleteExpired = %d, %v; want 2 (any client's expired rows), nil", n, err)
		}
		wantNoRow(t, db, region, "a")
		wantNoRow(t, db, region, "b")
		wantOwner(t, db, region, "live", b)
		wantOwner(t, db, otherRegion, "c", c)
	})
}

// Beyond Spring's tests.

func TestRacingClientsExactlyOneAcquires(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		region := randomRegion()
		const n = 20
		repos := make([]*jdbc.LockRepository, n)
		for i := range repos {
			repos[i] = newRepo(t, db, jdbc.WithRegion(region))
		}
		var (
			start = make(chan struct{})
			wg    sync.WaitGroup
			mu    sync.Mutex
			won   int
			errs  []error
		)
		for _, repo := range repos {
			wg.Go(func() {
				<-start
				for {
					_, ok, err := repo.Acquire(context.Background(), "contended", longTTL)
					if errors.Is(err, registry.ErrTransient) {
						continue // the registry retries these
					}
					mu.Lock()
					if err != nil {
						errs = append(errs, err)
					} else if ok {
						won++
					}
					mu.Unlock()
					return
				}
			})
		}
		close(start)
		wg.Wait()
		if len(errs) > 0 {
			t.Fatalf("errors: %v", errs)
		}
		if won != 1 {
			t.Fatalf("%d clients acquired the lock, want 1", won)
		}
	})
}

func TestContentionCausesNoDuplicateKeyErrors(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		region := randomRegion()
		const clients, rounds = 8, 25
		var (
			wg        sync.WaitGroup
			mu        sync.Mutex
			acquired  int
			transient int
			errs      []error
		)
		for range clients {
			repo := newRepo(t, db, jdbc.WithRegion(region))
			wg.Go(func() {
				for range rounds {
					_, ok, err := repo.Acquire(context.Background(), "hot", longTTL)
					if err == nil && ok {
						err = repo.Release(context.Background(), "hot")
					}
					mu.Lock()
					switch {
					case errors.Is(err, registry.ErrTransient):
						transient++
					case err != nil:
						errs = append(errs, err)
					case ok:
						acquired++
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		for _, err := range errs {
			t.Error(err)
		}
		if acquired == 0 {
			t.Fatal("nobody acquired the lock")
		}
		t.Logf("%d acquisitions, %d transient errors in %d attempts", acquired, transient, clients*rounds)
	})
}

func TestAcquireAndRenewUseTheDatabaseClock(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		region := randomRegion()
		repo := newRepo(t, db, jdbc.WithRegion(region))
		near := func(got, want time.Duration) bool { return got > want-time.Minute && got <= want+time.Second }

		mustAcquire(t, repo, "k", longTTL)
		if l := wantOwner(t, db, region, "k", repo); !near(l.Remaining, longTTL) {
			t.Fatalf("after Acquire, EXPIRED_AFTER - database now = %v, want about %v", l.Remaining, longTTL)
		}
		if err := repo.Renew(t.Context(), "k", 2*longTTL); err != nil {
			t.Fatal(err)
		}
		if l := wantOwner(t, db, region, "k", repo); !near(l.Remaining, 2*longTTL) {
			t.Fatalf("after Renew, EXPIRED_AFTER - database now = %v, want about %v", l.Remaining, 2*longTTL)
		}
	})
}

func TestTimesAreStoredAsUTCWallTime(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		region := randomRegion()
		repo := newRepo(t, db, jdbc.WithRegion(region))
		mustAcquire(t, repo, "k", longTTL)
		l := wantOwner(t, db, region, "k", repo)
		if d := time.Since(l.Created); d < -time.Minute || d > time.Minute {
			t.Fatalf("CREATED_DATE %v is %v away from UTC now; want UTC wall time as Spring writes it", l.Created, d)
		}
	})
}

func TestASpringRowHeldByAnotherClientIsRespected(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		region := randomRegion()
		repo := newRepo(t, db, jdbc.WithRegion(region))
		spring := uuid.NewString()
		now := time.Now()
		db.InsertSpringRow(t, table, region, jdbc.UUIDKey("order-42"), spring, now, now.Add(time.Hour))

		mustNotAcquire(t, repo, "order-42", longTTL)
		wantLockLost(t, "Renew", repo.Renew(t.Context(), "order-42", longTTL))
		wantLockLost(t, "Release", repo.Release(t.Context(), "order-42"))
		if l, _ := db.Lease(t, table, region, jdbc.UUIDKey("order-42")); l.ClientID != spring {
			t.Fatalf("the Spring client lost its row to %q", l.ClientID)
		}
	})
}

func TestAnExpiredSpringRowIsTakenOverKeepingItsCreatedDate(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		region := randomRegion()
		repo := newRepo(t, db, jdbc.WithRegion(region))
		created := time.Now().Add(-2 * time.Hour)
		db.InsertSpringRow(t, table, region, jdbc.UUIDKey("order-42"), uuid.NewString(), created, created.Add(time.Hour))

		mustAcquire(t, repo, "order-42", longTTL)
		l := wantOwner(t, db, region, "order-42", repo)
		if l.Remaining < longTTL/2 {
			t.Fatalf("the new lease expires in %v, want about %v", l.Remaining, longTTL)
		}
		if d := l.Created.Sub(created); d < -time.Second || d > time.Second {
			t.Fatalf("CREATED_DATE = %v, want the first insertion's %v", l.Created, created.UTC())
		}
	})
}

func TestKeysAreMappedLikeSpringsUUIDConverter(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		region, a, b := twoClients(t, db)
		mustAcquire(t, a, "foo", longTTL)
		if _, ok := db.Lease(t, table, region, "acbd18db-4cc2-385c-adef-654fccc4a4d8"); !ok {
			t.Fatal(`no row with LOCK_KEY acbd18db-4cc2-385c-adef-654fccc4a4d8 for key "foo"`)
		}
		// A UUID key is its own LOCK_KEY, in lower case: the same lock.
		mustNotAcquire(t, b, "ACBD18DB-4CC2-385C-ADEF-654FCCC4A4D8", longTTL)
		mustNotAcquire(t, b, "acbd18db-4cc2-385c-adef-654fccc4a4d8", longTTL)
	})
}

func TestUnusualKeysAcquireAndRelease(t *testing.T) {
	keys := map[string]string{
		"empty":          "",
		"invalid UTF-8":  "\xff\xfe\xfd",
		"NUL":            "a\x00b",
		"SQL":            `'; DROP TABLE INT_LOCK; -- "x" :lock_key ? $1`,
		"1 MiB":          strings.Repeat("k", 1<<20),
		"not quite UUID": "{acbd18db-4cc2-385c-adef-654fccc4a4d8}",
	}
	forEachDB(t, func(t *testing.T, db testDB) {
		repo := newRepo(t, db)
		for name, key := range keys {
			_, ok, err := repo.Acquire(t.Context(), key, longTTL)
			if err != nil || !ok {
				t.Fatalf("%s key: Acquire = %v, %v; want true, nil", name, ok, err)
			}
			if err := repo.Release(t.Context(), key); err != nil {
				t.Fatalf("%s key: Release: %v", name, err)
			}
		}
	})
}

func TestErrorsNameTheCallersKeyShortened(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		repo := newRepo(t, db)
		err := repo.Release(t.Context(), "order-42")
		wantLockLost(t, "Release", err)
		if !strings.Contains(err.Error(), `"order-42"`) {
			t.Errorf("error %q does not name the key", err)
		}
		err = repo.Release(t.Context(), strings.Repeat("k", 1<<20))
		wantLockLost(t, "Release", err)
		if len(err.Error()) > 1000 {
			t.Errorf("error message is %d bytes long", len(err.Error()))
		}
	})
}

func TestUUIDKey(t *testing.T) {
	for key, want := range map[string]string{
		"foo":                                  "acbd18db-4cc2-385c-adef-654fccc4a4d8",
		"":                                     "d41d8cd9-8f00-3204-a980-0998ecf8427e",
		"\xff\xfe":                             "f3b25701-fe36-3ec8-8616-a93a45ce9998",
		"héllo":                                "be50e847-8cf2-3ff3-995b-c7307fb91b50",
		"ACBD18DB-4CC2-385C-ADEF-654FCCC4A4D8": "acbd18db-4cc2-385c-adef-654fccc4a4d8",
		"acbd18db-4cc2-385c-adef-654fccc4a4d8": "acbd18db-4cc2-385c-adef-654fccc4a4d8",
	} {
		if got := jdbc.UUIDKey(key); got != want {
			t.Errorf("UUIDKey(%q) = %s, want %s", key, got, want)
		}
	}
	// Other spellings of a UUID are names like any other key.
	for _, key := range []string{
		"{acbd18db-4cc2-385c-adef-654fccc4a4d8}",
		"urn:uuid:acbd18db-4cc2-385c-adef-654fccc4a4d8",
		"acbd18db4cc2385cadef654fccc4a4d8",
		"acbd18db-4cc2-385c-adef-654fccc4a4d8\n",
		"acbd18db-4cc2-385c-adef-654fccc4a4dg",
	} {
		got := jdbc.UUIDKey(key)
		if got == "acbd18db-4cc2-385c-adef-654fccc4a4d8" || got[14] != '3' {
			t.Errorf("UUIDKey(%q) = %s, want a version 3 UUID of the key's bytes", key, got)
		}
	}
}

func TestCustomKeyMappingIsUsed(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		region := randomRegion()
		repo := newRepo(t, db, jdbc.WithRegion(region), jdbc.WithKeyMapping(func(k string) string { return "k-" + k }))
		mustAcquire(t, repo, "x", longTTL)
		if _, ok := db.Lease(t, table, region, "k-x"); !ok {
			t.Fatal(`no row with LOCK_KEY "k-x"`)
		}
		if err := repo.Release(t.Context(), "x"); err != nil {
			t.Fatal(err)
		}
		_, _, err := repo.Acquire(t.Context(), strings.Repeat("x", 40), longTTL)
		if !errors.Is(err, jdbc.ErrInvalidOption) || !strings.Contains(err.Error(), "WithKeyMapping") {
			t.Fatalf("a mapping to 42 bytes: got %v, want ErrInvalidOption naming WithKeyMapping", err)
		}
	})
}

func TestRegionIsBoundAsAParameter(t *testing.T) {
	regions := []string{
		`it's; DROP TABLE INT_LOCK; -- "x" :region ? $1`,
		"régïon ✓",
		strings.Repeat("r", 100),
	}
	forEachDB(t, func(t *testing.T, db testDB) {
		for _, region := range regions {
			key := uuid.NewString()
			a := newRepo(t, db, jdbc.WithRegion(region))
			b := newRepo(t, db, jdbc.WithRegion(region))
			mustAcquire(t, a, key, longTTL)
			mustNotAcquire(t, b, key, longTTL)
			wantOwner(t, db, region, key, a)
			if err := a.Release(t.Context(), key); err != nil {
				t.Fatal(err)
			}
		}
	})
}

func TestRegionsAreIndependent(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		a, b := newRepo(t, db), newRepo(t, db)
		mustAcquire(t, a, "k", longTTL)
		mustAcquire(t, b, "k", longTTL)
	})
}

func TestClientIDIsARandomUUIDByDefault(t *testing.T) {
	db := offlineDB(t)
	a, _ := jdbc.NewLockRepository(context.Background(), db)
	b, _ := jdbc.NewLockRepository(context.Background(), db, jdbc.WithClientID("worker-1"))
	if _, err := uuid.Parse(a.ClientID()); err != nil || len(a.ClientID()) != 36 {
		t.Errorf("default ClientID %q is not a UUID", a.ClientID())
	}
	if c, _ := jdbc.NewLockRepository(context.Background(), db); c.ClientID() == a.ClientID() {
		t.Error("two repositories got the same default client id")
	}
	if b.ClientID() != "worker-1" {
		t.Errorf("ClientID() = %q, want worker-1", b.ClientID())
	}
}

// offlineDB is a database handle on a fresh SQLite file: sql.Open does no
// I/O, and NewLockRepository finds the table missing, which it accepts.
func offlineDB(t testing.TB) *sql.DB {
	db, err := sql.Open("sqlite", "file:"+t.TempDir()+"/never-opened.db")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestCustomPrefixUsesItsOwnTable(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		db.Exec(t, `DROP TABLE IF EXISTS TEST_LOCK`)
		t.Cleanup(func() { db.Exec(t, `DROP TABLE IF EXISTS TEST_LOCK`) })
		for range 2 { // idempotent
			if err := jdbc.CreateSchema(t.Context(), db.DB, jdbc.WithPrefix("TEST_")); err != nil {
				t.Fatal(err)
			}
		}
		region := randomRegion()
		repo := newRepo(t, db, jdbc.WithPrefix("TEST_"), jdbc.WithRegion(region))
		if err := repo.Check(t.Context()); err != nil {
			t.Fatal(err)
		}
		mustAcquire(t, repo, "k", longTTL)
		if _, ok := db.Lease(t, "TEST_LOCK", region, jdbc.UUIDKey("k")); !ok {
			t.Fatal("no row in TEST_LOCK")
		}
		if _, ok := db.Lease(t, table, region, jdbc.UUIDKey("k")); ok {
			t.Fatal("a row in INT_LOCK")
		}
		if err := repo.Release(t.Context(), "k"); err != nil {
			t.Fatal(err)
		}
	})
}

func TestMissingTableIsErrNoTable(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		db.Exec(t, `DROP TABLE IF EXISTS TEST_LOCK`)
		repo := newRepo(t, db, jdbc.WithPrefix("TEST_"))
		ctx := t.Context()
		_, _, acquireErr := repo.Acquire(ctx, "k", longTTL)
		_, deleteErr := repo.DeleteExpired(ctx)
		for op, err := range map[string]error{
			"Acquire":       acquireErr,
			"Renew":         repo.Renew(ctx, "k", longTTL),
			"Release":       repo.Release(ctx, "k"),
			"Check":         repo.Check(ctx),
			"DeleteExpired": deleteErr,
			"Close":         repo.Close(ctx),
		} {
			if !errors.Is(err, jdbc.ErrNoTable) {
				t.Errorf("%s: got %v, want an error wrapping jdbc.ErrNoTable", op, err)
				continue
			}
			if msg := err.Error(); !strings.Contains(msg, "TEST_LOCK") || !strings.Contains(msg, "jdbc.CreateSchema") {
				t.Errorf("%s: message %q should name TEST_LOCK and jdbc.CreateSchema", op, msg)
			}
			if errors.Is(err, registry.ErrTransient) || errors.Is(err, registry.ErrLockLost) {
				t.Errorf("%s: a missing table is neither transient nor a lost lock: %v", op, err)
			}
		}
	})
}

func TestCheckPassesOnTheTable(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		if err := newRepo(t, db).Check(t.Context()); err != nil {
			t.Fatal(err)
		}
	})
}

func TestInvalidOptionsAreErrInvalidOption(t *testing.T) {
	db := offlineDB(t)
	for _, c := range []struct {
		option string
		opt    jdbc.Option
	}{
		{"WithPrefix", jdbc.WithPrefix(`INT_"`)},
		{"WithPrefix", jdbc.WithPrefix("INT_'")},
		{"WithPrefix", jdbc.WithPrefix("INT_;")},
		{"WithPrefix", jdbc.WithPrefix("MY PREFIX_")},
		{"WithPrefix", jdbc.WithPrefix("")},
		{"WithPrefix", jdbc.WithPrefix("1_")},
		{"WithPrefix", jdbc.WithPrefix("x.INT_")},
		{"WithPrefix", jdbc.WithPrefix(strings.Repeat("P", 41))},
		{"WithRegion", jdbc.WithRegion("")},
		{"WithRegion", jdbc.WithRegion(strings.Repeat("r", 101))},
		{"WithRegion", jdbc.WithRegion("\xff")},
		{"WithRegion", jdbc.WithRegion("a\x00b")},
		{"WithClientID", jdbc.WithClientID("")},
		{"WithClientID", jdbc.WithClientID(strings.Repeat("c", 37))},
		{"WithDialect", jdbc.WithDialect("oracle")},
		{"WithKeyMapping", jdbc.WithKeyMapping(nil)},
		{"WithAcquireQuery", jdbc.WithAcquireQuery("")},
		{"WithAcquireQuery", jdbc.WithAcquireQuery("DELETE FROM {prefix}LOCK WHERE LOCK_KEY = :key")},
		{"WithAcquireQuery", jdbc.WithAcquireQuery("DELETE FROM {prefix}LOCK WHERE LOCK_KEY = 'k")},
		{"WithRenewQuery", jdbc.WithRenewQuery(" ")},
		{"WithReleaseQuery", jdbc.WithReleaseQuery("DELETE FROM {prefix}LOCK WHERE CREATED_DATE < {today}")},
	} {
		_, err := jdbc.NewLockRepository(context.Background(), db, c.opt)
		if !errors.Is(err, jdbc.ErrInvalidOption) || !strings.Contains(err.Error(), c.option) {
			t.Errorf("NewLockRepository: got %v, want ErrInvalidOption naming %s", err, c.option)
		}
		if c.option == "WithPrefix" {
			if err := jdbc.CreateSchema(context.Background(), db, c.opt); !errors.Is(err, jdbc.ErrInvalidOption) {
				t.Errorf("CreateSchema: got %v, want ErrInvalidOption", err)
			}
		}
	}
}

func TestValidEdgeOptionsAreAccepted(t *testing.T) {
	db := offlineDB(t)
	for _, opt := range []jdbc.Option{
		jdbc.WithPrefix("_"),
		jdbc.WithPrefix("my_app_"),
		jdbc.WithRegion(strings.Repeat("r", 100)),
		jdbc.WithRegion(`'"; --`),
		jdbc.WithClientID(strings.Repeat("c", 36)),
		jdbc.WithDialect(jdbc.SQLite), // the dialect of db: NewLockRepository checks the table
	} {
		if _, err := jdbc.NewLockRepository(context.Background(), db, opt); err != nil {
			t.Error(err)
		}
	}
}

func TestNilDatabaseIsAnError(t *testing.T) {
	for name, db := range map[string]jdbc.DB{
		"nil":            nil,
		"nil *sql.DB":    (*sql.DB)(nil),
		"nil *sqlx.DB":   (*sqlx.DB)(nil),
		"empty *sqlx.DB": &sqlx.DB{},
	} {
		if _, err := jdbc.NewLockRepository(context.Background(), db, jdbc.WithDialect(jdbc.Postgres)); err == nil {
			t.Errorf("NewLockRepository(%s) succeeded", name)
		}
		if _, err := jdbc.NewLockRepository(context.Background(), db); err == nil {
			t.Errorf("NewLockRepository(%s) without WithDialect succeeded", name)
		}
		if err := jdbc.CreateSchema(context.Background(), db); err == nil {
			t.Errorf("CreateSchema(%s) succeeded", name)
		}
	}
}

// wrappedDriverDB hides its driver's package behind a type of its own, as
// tracing wrappers do.
type wrappedDriverDB struct{ *sql.DB }

type wrappedDriver struct{ driver.Driver }

func (w wrappedDriverDB) Driver() driver.Driver { return wrappedDriver{w.DB.Driver()} }

func TestUnknownDriverNeedsWithDialect(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		wrapped := wrappedDriverDB{db.DB}
		if _, err := jdbc.NewLockRepository(context.Background(), wrapped); !errors.Is(err, jdbc.ErrUnknownDialect) {
			t.Fatalf("got %v, want ErrUnknownDialect", err)
		}
		repo := newRepoOn(t, wrapped, jdbc.WithRegion(randomRegion()), jdbc.WithDialect(db.Dialect))
		mustAcquire(t, repo, "k", longTTL)
	})
}

func TestSQLXDatabaseIsAccepted(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		// "pgx/v5" is a driver name sqlx does not know; the repository binds
		// parameters for its dialect itself.
		x := sqlx.NewDb(db.DB, "pgx/v5")
		repo := newRepoOn(t, x, jdbc.WithRegion(randomRegion()))
		mustAcquire(t, repo, "k", longTTL)
		if err := repo.Release(t.Context(), "k"); err != nil {
			t.Fatal(err)
		}
	})
}

// An acquisition that finds the lease being released by another client's
// transaction, still in flight, waits for it and takes the lease; also for
// a key whose row the repository took before, for which PostgreSQL's
// repository first tries a plain UPDATE, whose snapshot shows the lease
// still held.
func TestAnAcquisitionWaitsForAReleaseInFlightAndTakesTheLease(t *testing.T) {
	// SQLite locks the whole database, and the test cannot see who waits.
	forEachDBWhere(t, func(db testDB) bool { return db.Dialect != jdbc.SQLite }, func(t *testing.T, db testDB) {
		ctx := context.Background()
		region := randomRegion()
		repo := newRepo(t, db, jdbc.WithRegion(region))
		other := newRepo(t, db, jdbc.WithRegion(region))
		mustAcquire(t, repo, "k", longTTL)
		if err := repo.Release(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		mustAcquire(t, other, "k", longTTL)

		c := db.conn(t)
		var blocker int64
		pid := map[jdbc.Dialect]string{jdbc.Postgres: `SELECT pg_backend_pid()`, jdbc.MySQL: `SELECT CONNECTION_ID()`}[db.Dialect]
		if err := c.QueryRowContext(ctx, pid).Scan(&blocker); err != nil {
			t.Fatal(err)
		}
		tx, err := c.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		past := db.At(db.Now(t).Add(-time.Second))
		if _, err := tx.ExecContext(ctx, db.Q(`UPDATE `+table+` SET EXPIRED_AFTER = ? WHERE REGION = ? AND LOCK_KEY = ?`),
			past, region, jdbc.UUIDKey("k")); err != nil {
			t.Fatal(err)
		}
		type outcome struct {
			ok  bool
			err error
		}
		done := make(chan outcome, 1)
		go func() {
			_, ok, err := repo.Acquire(ctx, "k", longTTL)
			done <- outcome{ok, err}
		}()
		db.waitBlocked(t, blocker)
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if o := <-done; o.err != nil || !o.ok {
			t.Fatalf("Acquire after the release committed = %v, %v; want the lease", o.ok, o.err)
		}
	})
}

// An acquisition takes one round trip whatever the repository knows of the
// key's row: none yet, a row another client holds, one it took before,
// and one another client held lately.
func TestEveryAcquisitionTakesOneRoundTrip(t *testing.T) {
	// Round trips are counted on the network, which SQLite has none of.
	forEachDBWhere(t, func(db testDB) bool { return db.Dialect != jdbc.SQLite }, func(t *testing.T, db testDB) {
		_, server, swap := viaProxy(t, db)
		proxy := newTurnCounter(t, server)
		pool := openPool(t, db.Driver, swap(proxy.addr()))
		pool.SetMaxOpenConns(1) // one connection: the statements stay prepared on it
		region := randomRegion()
		repo := newRepoOn(t, pool, jdbc.WithRegion(region))
		other := newRepo(t, db, jdbc.WithRegion(region))
		ctx := context.Background()
		mustAcquire(t, repo, "warm-up", longTTL) // connects and prepares
		if err := repo.Release(ctx, "warm-up"); err != nil {
			t.Fatal(err)
		}
		mustAcquire(t, repo, "warm-up", longTTL)

		acquire := func(what, key string, want bool) {
			t.Helper()
			before := proxy.turns.Load()
			_, ok, err := repo.Acquire(ctx, key, longTTL)
			if err != nil || ok != want {
				t.Fatalf("Acquire %s = %v, %v; want %v", what, ok, err, want)
			}
			if n := proxy.turns.Load() - before; n != 1 {
				t.Errorf("Acquire %s took %d round trips, want 1", what, n)
			}
		}
		release := func(r *jdbc.LockRepository, key string) {
			t.Helper()
			if err := r.Release(ctx, key); err != nil {
				t.Fatal(err)
			}
		}
		acquire("of a new key", "new", true)
		release(repo, "new")
		acquire("of a row taken before", "new", true)
		mustAcquire(t, other, "held", longTTL)
		acquire("of a row held elsewhere", "held", false)
		acquire("of a row held elsewhere, again", "held", false)
		release(other, "held")
		acquire("of a row held elsewhere lately", "held", true)
	})
}

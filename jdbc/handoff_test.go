package jdbc_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockreg/lockreg/jdbc"
	"github.com/lockreg/lockreg/jdbc/pgxlisten"
	"github.com/lockreg/lockreg/jdbc/pqlisten"
	"github.com/lockreg/lockreg/registry"
)

// Hand-off across processes on PostgreSQL: notifications, the waiter queue,
// fencing tokens under contention and the lost-lease signal.

// forEachPostgres runs test on PostgreSQL through pgx and lib/pq, each with
// its driver's listener.
func forEachPostgres(t *testing.T, test func(t *testing.T, db testDB, listener jdbc.Listener)) {
	forEachDB(t, func(t *testing.T, db testDB) {
		switch db.Name {
		case "postgres-pgx":
			test(t, db, pgxlisten.New(db.DB))
		case "postgres-pq":
			test(t, db, pqlisten.New(db.DSN))
		default:
			t.Skip("requires PostgreSQL: notifications and the waiter queue are PostgreSQL features")
		}
	})
}

// process is one registry over its own repository in region, standing for
// one process.
func process(t testing.TB, db testDB, region string, l jdbc.Listener, opts ...registry.Option) (*registry.Registry, *jdbc.LockRepository) {
	t.Helper()
	jopts := []jdbc.Option{jdbc.WithRegion(region)}
	if l != nil {
		jopts = append(jopts, jdbc.WithListener(l))
	}
	repo := newRepo(t, db, jopts...)
	r, err := registry.New(repo, append([]registry.Option{registry.WithIdleBetweenTries(20 * time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(context.Background()) })
	return r, repo
}

// waitQueued waits until client is in key's queue.
func waitQueued(t testing.TB, db testDB, region, key, client string) {
	t.Helper()
	waitQueuedAt(t, db, region, jdbc.UUIDKey(key), client)
}

// waitQueuedAt waits until client is in the queue of LOCK_KEY lockKey.
func waitQueuedAt(t testing.TB, db testDB, region, lockKey, client string) {
	t.Helper()
	for range 500 {
		var n int
		err := db.DB.QueryRowContext(context.Background(), db.Q(`SELECT count(*) FROM INT_LOCK_WAIT WHERE REGION = ? AND LOCK_KEY = ? AND CLIENT_ID = ?`),
			region, lockKey, client).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("client %s never queued for %q", client, lockKey)
}

// waitListening waits until a repository of region (with the default
// prefix) listens on its channel.
func waitListening(t testing.TB, db testDB, region string) {
	t.Helper()
	sum := sha256.Sum256([]byte("INT_\x00" + region))
	listen := `LISTEN "lockreg_` + hex.EncodeToString(sum[:12]) + `"`
	for range 500 {
		var n int
		err := db.DB.QueryRowContext(context.Background(), `SELECT count(*) FROM pg_stat_activity WHERE query = $1`, listen).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("nobody listens for region %q", region)
}

func TestReleaseWakesAWaiterInAnotherProcessWithoutPolling(t *testing.T) {
	forEachPostgres(t, func(t *testing.T, db testDB, l jdbc.Listener) {
		region := randomRegion()
		r1, _ := process(t, db, region, l)
		r2, repo2 := process(t, db, region, l, registry.WithIdleBetweenTries(time.Minute))
		handOverByNotification(t, db, region, r1, r2, "k", jdbc.UUIDKey("k"), repo2.ClientID())
	})
}

// handOverByNotification locks key in r1, has r2, whose client is client
// and which polls only every minute, wait for it in the queue of LOCK_KEY
// lockKey, and releases it once r2's repository listens: only the
// release's notification can hand the lock over before r2's context ends.
func handOverByNotification(t *testing.T, db testDB, region string, r1, r2 *registry.Registry, key, lockKey, client string) {
	t.Helper()
	l1 := r1.Obtain(key)
	if err := l1.LockContext(t.Context()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	got := make(chan error, 1)
	go func() { got <- r2.Obtain(key).LockContext(ctx) }()
	waitQueuedAt(t, db, region, lockKey, client)
	waitListening(t, db, region) // else the listener's first wake-up, when it listens, could hand over
	if err := l1.UnlockContext(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("the waiter was not woken by the release: %v", err)
	}
}

// A notification names the key and the client it hands the lease to,
// separated by a space; a key mapped to a LOCK_KEY with spaces of its own
// wakes its waiter all the same.
func TestReleaseWakesAWaiterOfAKeyWithSpacesWithoutPolling(t *testing.T) {
	forEachPostgres(t, func(t *testing.T, db testDB, l jdbc.Listener) {
		region := randomRegion()
		same := jdbc.WithKeyMapping(func(key string) string { return key })
		proc := func(opts ...registry.Option) (*registry.Registry, *jdbc.LockRepository) {
			repo := newRepo(t, db, jdbc.WithRegion(region), jdbc.WithListener(l), same)
			r, err := registry.New(repo, opts...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { r.Close(context.Background()) })
			return r, repo
		}
		const key = "order 42 of acme"
		r1, _ := proc()
		r2, repo2 := proc(registry.WithIdleBetweenTries(time.Minute))
		handOverByNotification(t, db, region, r1, r2, key, key, repo2.ClientID())
	})
}

func TestWaitersAreServedInArrivalOrderAndTheReleaserQueuesBehindThem(t *testing.T) {
	forEachPostgres(t, func(t *testing.T, db testDB, l jdbc.Listener) {
		region := randomRegion()
		var (
			mu    sync.Mutex
			order []int
			wg    sync.WaitGroup
		)
		turn := func(r *registry.Registry, i int) {
			defer wg.Done()
			lk := r.Obtain("k")
			if err := lk.LockContext(t.Context()); err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			if err := lk.UnlockContext(t.Context()); err != nil {
				t.Error(err)
			}
		}
		r0, _ := process(t, db, region, l)
		l0 := r0.Obtain("k")
		if err := l0.LockContext(t.Context()); err != nil {
			t.Fatal(err)
		}
		for i := 1; i <= 3; i++ {
			r, repo := process(t, db, region, l)
			wg.Add(1)
			go turn(r, i)
			waitQueued(t, db, region, "k", repo.ClientID())
		}
		if err := l0.UnlockContext(t.Context()); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		turn(r0, 0) // asks again at once
		wg.Wait()
		if want := []int{1, 2, 3, 0}; !slices.Equal(order, want) {
			t.Fatalf("served in order %v, want %v", order, want)
		}
	})
}

// listeners returns the backend pids of lockreg's LISTEN connections to
// db's database (other databases of the server may be other test runs').
func listeners(t testing.TB, db testDB) []int64 {
	t.Helper()
	rows, err := db.DB.QueryContext(context.Background(),
		`SELECT pid FROM pg_stat_activity WHERE query LIKE 'LISTEN "lockreg_%' AND pid <> pg_backend_pid() `+
			`AND datname = current_database() ORDER BY pid`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var pids []int64
	for rows.Next() {
		var p int64
		if err := rows.Scan(&p); err != nil {
			t.Fatal(err)
		}
		pids = append(pids, p)
	}
	return pids
}

func TestAKilledListenerCostsLatencyNotTheLockAndComesBack(t *testing.T) {
	forEachPostgres(t, func(t *testing.T, db testDB, l jdbc.Listener) {
		region := randomRegion()
		var reported atomic.Int32
		repo1 := newRepo(t, db, jdbc.WithRegion(region))
		repo2 := newRepo(t, db, jdbc.WithRegion(region), jdbc.WithListener(l),
			jdbc.WithErrorHandler(func(error) { reported.Add(1) }))
		r1, err := registry.New(repo1, registry.WithIdleBetweenTries(20*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		r2, err := registry.New(repo2, registry.WithIdleBetweenTries(200*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		defer r1.Close(context.Background())
		defer r2.Close(context.Background())
		handOff := func() error {
			l1 := r1.Obtain("k")
			if err := l1.LockContext(t.Context()); err != nil {
				return err
			}
			got := make(chan error, 1)
			go func() {
				l2 := r2.Obtain("k")
				if err := l2.LockContext(t.Context()); err != nil {
					got <- err
					return
				}
				got <- l2.UnlockContext(t.Context())
			}()
			waitQueued(t, db, region, "k", repo2.ClientID())
			if err := l1.UnlockContext(t.Context()); err != nil {
				return err
			}
			return <-got
		}
		if err := handOff(); err != nil { // starts the listener
			t.Fatal(err)
		}
		// The waiter may have been served by polling before the listener's
		// connection got to LISTEN.
		var before []int64
		for i := 0; len(before) == 0; i++ {
			if i == 300 {
				t.Fatal("no listening connection")
			}
			if i > 0 {
				time.Sleep(50 * time.Millisecond)
			}
			before = listeners(t, db)
		}
		for _, pid := range before {
			db.Exec(t, `SELECT pg_terminate_backend(?)`, pid)
		}
		// Without notifications the waiter still gets the lock by polling.
		if err := handOff(); err != nil {
			t.Fatal(err)
		}
		// The listener comes back on a new connection.
		for i := 0; ; i++ {
			if now := listeners(t, db); len(now) > 0 && !slices.Contains(before, now[len(now)-1]) {
				break
			}
			if i == 300 {
				t.Fatal("the listener did not reconnect")
			}
			time.Sleep(50 * time.Millisecond)
		}
		if err := handOff(); err != nil {
			t.Fatal(err)
		}
		if reported.Load() == 0 {
			t.Fatal("the listener's failure was not reported")
		}
	})
}

func TestTokensIncreaseOverAThousandAcquisitionsByFourRegistries(t *testing.T) {
	forEachPostgres(t, func(t *testing.T, db testDB, l jdbc.Listener) {
		region := randomRegion()
		const registries, each = 4, 250
		var (
			mu     sync.Mutex
			tokens []int64
			wg     sync.WaitGroup
		)
		for range registries {
			r, _ := process(t, db, region, l)
			wg.Add(1)
			go func() {
				defer wg.Done()
				lk := r.Obtain("k")
				for range each {
					if err := lk.LockContext(t.Context()); err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					tokens = append(tokens, lk.Token())
					mu.Unlock()
					if err := lk.UnlockContext(t.Context()); err != nil {
						t.Error(err)
					}
				}
			}()
		}
		wg.Wait()
		if len(tokens) != registries*each {
			t.Fatalf("%d acquisitions, want %d", len(tokens), registries*each)
		}
		for i := 1; i < len(tokens); i++ {
			if tokens[i] <= tokens[i-1] {
				t.Fatalf("token %d at acquisition %d is not greater than %d before it", tokens[i], i, tokens[i-1])
			}
		}
		// Tokens keep increasing after every row is deleted by hand.
		last := tokens[len(tokens)-1]
		db.Exec(t, `DELETE FROM INT_LOCK WHERE REGION = ?`, region)
		r, _ := process(t, db, region, l)
		lk := r.Obtain("k")
		if err := lk.LockContext(t.Context()); err != nil {
			t.Fatal(err)
		}
		defer lk.Unlock()
		if lk.Token() <= last {
			t.Fatalf("token %d after deleting the rows is not greater than %d", lk.Token(), last)
		}
	})
}

func TestDoneClosesBeforeAnotherRegistryAcquiresWhileRenewalIsBlocked(t *testing.T) {
	forEachPostgres(t, func(t *testing.T, db testDB, l jdbc.Listener) {
		region := randomRegion()
		const ttl = 1500 * time.Millisecond
		r1, _ := process(t, db, region, l, registry.WithTTL(ttl), registry.WithKeepAlive(),
			registry.WithErrorHandler(func(string, error) {}))
		r2, _ := process(t, db, region, l)
		l1 := r1.Obtain("k")
		if err := l1.LockContext(t.Context()); err != nil {
			t.Fatal(err)
		}
		// Another transaction locks the row: renewals (and r2's attempts)
		// wait on it, as they would behind a dead connection.
		_, unblock := db.blockRow(t, table, region, jdbc.UUIDKey("k"))
		var doneFirst atomic.Bool
		got := make(chan error, 1)
		go func() {
			l2 := r2.Obtain("k")
			err := l2.LockContext(t.Context())
			if err == nil && !doneFirst.Load() {
				err = errors.New("another registry acquired before Done closed")
			}
			if err == nil {
				err = l2.UnlockContext(t.Context())
			}
			got <- err
		}()
		select {
		case <-l1.Done():
			doneFirst.Store(true)
		case <-time.After(20 * ttl):
			t.Fatal("Done did not close although renewals could not reach the row")
		}
		unblock()
		_ = l1.UnlockContext(t.Context()) // lets r2 in if a late renewal kept the lease
		if err := <-got; err != nil {
			t.Fatal(err)
		}
	})
}

func TestDoneClosesWhenTheRowIsExpiredByHand(t *testing.T) {
	forEachPostgres(t, func(t *testing.T, db testDB, l jdbc.Listener) {
		region := randomRegion()
		r1, _ := process(t, db, region, l, registry.WithTTL(600*time.Millisecond), registry.WithKeepAlive(),
			registry.WithErrorHandler(func(string, error) {}))
		l1 := r1.Obtain("k")
		if err := l1.LockContext(t.Context()); err != nil {
			t.Fatal(err)
		}
		db.Exec(t, `UPDATE INT_LOCK SET EXPIRED_AFTER = EXPIRED_AFTER - INTERVAL '1 hour' WHERE REGION = ?`, region)
		select {
		case <-l1.Done():
		case <-time.After(30 * time.Second):
			t.Fatal("Done did not close after the lease was lost")
		}
		if err := l1.UnlockContext(t.Context()); err != nil && !errors.Is(err, registry.ErrLockLost) {
			t.Fatal(err)
		}
	})
}

// A release by a client that took its lease itself (not by a hand-off)
// tries the one-UPDATE release first; with a waiter queued that statement
// must leave the row alone, so that the hand-off statement gives the lease
// to the waiter.
func TestAReleaseOfALeaseTakenDirectlyHandsItToAQueuedWaiter(t *testing.T) {
	forEachPostgres(t, func(t *testing.T, db testDB, l jdbc.Listener) {
		region := randomRegion()
		holder := longPlacesRepo(t, db, region, l)
		waiter := longPlacesRepo(t, db, region, l)
		ctx := t.Context()
		mustAcquire(t, holder, "k", longTTL)
		mustQueue(t, waiter, "k", longTTL)
		if err := holder.Release(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		lease, found := db.Lease(t, table, region, jdbc.UUIDKey("k"))
		if !found || lease.ClientID != waiter.ClientID() || lease.Remaining <= 0 {
			t.Fatalf("after the release the row is %+v (found %v); want it handed to the waiter %s", lease, found, waiter.ClientID())
		}
		if _, ok, err := waiter.HandedLease(ctx, "k"); err != nil || !ok {
			t.Fatalf("HandedLease = %v, %v; want the handed lease", ok, err)
		}
	})
}

package jdbc_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/lockreg/lockreg/jdbc"
)

// A release and a waiter's queue statement (AcquireOrWait) racing on
// PostgreSQL. Under READ COMMITTED a release reads the queue as it was when
// its statement began; a waiter whose queue statement is in flight then
// (it has locked the lock row, its place is not committed yet) must still
// get the lease or hear of the release. The tests order the statements
// with transactions of their own that hold the rows, never with sleeps.

// stallQueueing makes waiter's next queue statement for key stop after it
// has written (or locked) the lock row and before it commits its place in
// the queue: another transaction inserts the waiter's place first and keeps
// it uncommitted until the returned function is called, which rolls it back
// so that the waiter's own insert proceeds. It returns the backend pid of
// that transaction.
func stallQueueing(t *testing.T, db testDB, region, key, waiter string) (pid int64, proceed func()) {
	t.Helper()
	ctx := context.Background()
	c := db.conn(t)
	if err := c.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	tx, err := c.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO INT_LOCK_WAIT (LOCK_KEY, REGION, CLIENT_ID, WAITING_SINCE, WAITING_UNTIL) `+
		`VALUES ($1, $2, $3, timezone('UTC', now()), timezone('UTC', now()))`, jdbc.UUIDKey(key), region, waiter); err != nil {
		tx.Rollback()
		t.Fatal(err)
	}
	done := false
	proceed = func() {
		if !done {
			done = true
			tx.Rollback()
		}
	}
	t.Cleanup(proceed)
	return pid, proceed
}

// blockedBy waits until a session of db's database waits for a lock that
// the backend blocker holds, and returns that session's backend pid.
func blockedBy(t *testing.T, db testDB, blocker int64) int64 {
	t.Helper()
	for range 2000 {
		var pid sql.NullInt64
		err := db.DB.QueryRowContext(context.Background(), `SELECT min(pid) FROM pg_stat_activity `+
			`WHERE $1 = ANY(pg_blocking_pids(pid)) AND datname = current_database()`, blocker).Scan(&pid)
		if err != nil {
			t.Fatal(err)
		}
		if pid.Valid {
			return pid.Int64
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("nothing waited for backend %d", blocker)
	return 0
}

type acquired struct {
	ok  bool
	err error
}

// raceReleaseWithQueueing runs release while waiter's queue statement for
// "k" is in flight: the queue statement has the lock row, and the release
// takes its snapshot and then waits for the row; then the queue statement
// commits, and the release goes on. It returns whether the waiter's
// statement took the lease, and the release's error.
func raceReleaseWithQueueing(t *testing.T, db testDB, region string, waiter *jdbc.LockRepository, release func() error) (bool, error) {
	t.Helper()
	blocker, proceed := stallQueueing(t, db, region, "k", waiter.ClientID())
	queued := make(chan acquired, 1)
	go func() {
		_, ok, err := waiter.AcquireOrWait(context.Background(), "k", longTTL)
		queued <- acquired{ok, err}
	}()
	w := blockedBy(t, db, blocker) // the waiter's statement, holding the lock row
	released := make(chan error, 1)
	go func() { released <- release() }()
	blockedBy(t, db, w) // the release, waiting for the lock row
	proceed()
	q := <-queued
	if q.err != nil {
		t.Fatalf("AcquireOrWait: %v", q.err)
	}
	return q.ok, <-released
}

func TestAReleaseOfALeaseTakenDirectlyHandsItToAWaiterWhoseQueueStatementWasInFlight(t *testing.T) {
	forEachPostgres(t, func(t *testing.T, db testDB, l jdbc.Listener) {
		region := randomRegion()
		holder := longPlacesRepo(t, db, region, l)
		waiter := longPlacesRepo(t, db, region, l)
		mustAcquire(t, holder, "k", longTTL)
		took, err := raceReleaseWithQueueing(t, db, region, waiter, func() error { return holder.Release(context.Background(), "k") })
		if err != nil {
			t.Fatalf("Release: %v", err)
		}
		if took {
			t.Fatal("the waiter's statement took the lease although it had the row before the release")
		}
		lease, found := db.Lease(t, table, region, jdbc.UUIDKey("k"))
		if !found || lease.ClientID != waiter.ClientID() || lease.Remaining <= 0 {
			t.Fatalf("after the release the row is %+v (found %v); want it handed to the waiter %s: the hand-off was missed",
				lease, found, waiter.ClientID())
		}
	})
}

func TestAReleaseOfAHandedLeaseWakesAWaiterWhoseQueueStatementWasInFlight(t *testing.T) {
	forEachPostgres(t, func(t *testing.T, db testDB, l jdbc.Listener) {
		region := randomRegion()
		ctx := t.Context()
		first := longPlacesRepo(t, db, region, l)
		holder := longPlacesRepo(t, db, region, l)
		waiter := longPlacesRepo(t, db, region, l)
		// The holder's lease is handed over, so its release goes straight
		// to the hand-off statement.
		mustAcquire(t, first, "k", longTTL)
		mustQueue(t, holder, "k", longTTL)
		if err := first.Release(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		if _, ok, err := holder.HandedLease(ctx, "k"); err != nil || !ok {
			t.Fatalf("HandedLease = %v, %v; want the handed lease", ok, err)
		}
		woken := make(chan struct{}, 1)
		stop := waiter.Notify("k", woken)
		defer stop()
		<-woken // the listener listens (it wakes every waiter then)

		took, err := raceReleaseWithQueueing(t, db, region, waiter, func() error { return holder.Release(context.Background(), "k") })
		if err != nil {
			t.Fatalf("Release: %v", err)
		}
		if took {
			t.Fatal("the waiter's statement took the lease although it had the row before the release")
		}
		if lease, found := db.Lease(t, table, region, jdbc.UUIDKey("k")); !found || lease.ClientID != waiter.ClientID() {
			// Not handed over (the release did not see the place): the
			// waiter must be woken to take the expired lease itself.
			select {
			case <-woken:
			case <-time.After(30 * time.Second):
				t.Fatalf("the release left the row %+v and did not wake the waiter: the hand-off was missed", lease)
			}
			if _, ok, err := waiter.AcquireOrWait(ctx, "k", longTTL); err != nil || !ok {
				t.Fatalf("the woken waiter's AcquireOrWait = %v, %v; want the lease", ok, err)
			}
		}
	})
}

// queuedUntil reads the has-waiters flag of key's row: whether it is set
// and whether it lies in the future, by the database's clock.
func queuedUntil(t *testing.T, db testDB, region, key string) (set, live bool) {
	t.Helper()
	err := db.DB.QueryRowContext(context.Background(), `SELECT QUEUED_UNTIL IS NOT NULL, COALESCE(QUEUED_UNTIL >= timezone('UTC', now()), false) `+
		`FROM INT_LOCK WHERE REGION = $1 AND LOCK_KEY = $2`, region, jdbc.UUIDKey(key)).Scan(&set, &live)
	if err != nil {
		t.Fatal(err)
	}
	return set, live
}

func TestTheWaitersFlagStaysWhileWaitersRemainAndClearsWithTheLastHandOff(t *testing.T) {
	forEachPostgres(t, func(t *testing.T, db testDB, l jdbc.Listener) {
		region := randomRegion()
		ctx := t.Context()
		holder := longPlacesRepo(t, db, region, l)
		w1 := longPlacesRepo(t, db, region, l)
		w2 := longPlacesRepo(t, db, region, l)
		mustAcquire(t, holder, "k", longTTL)
		if set, _ := queuedUntil(t, db, region, "k"); set {
			t.Fatal("the flag is set before anybody waited")
		}
		for _, w := range []*jdbc.LockRepository{w1, w2} {
			if _, ok, err := w.AcquireOrWait(ctx, "k", longTTL); err != nil || ok {
				t.Fatalf("AcquireOrWait of the held lease = %v, %v; want false, nil (queued)", ok, err)
			}
		}
		if _, live := queuedUntil(t, db, region, "k"); !live {
			t.Fatal("the flag is not live with two waiters queued")
		}
		release := func(from, to *jdbc.LockRepository) {
			t.Helper()
			if err := from.Release(ctx, "k"); err != nil {
				t.Fatal(err)
			}
			if _, ok, err := to.HandedLease(ctx, "k"); err != nil || !ok {
				t.Fatalf("HandedLease = %v, %v; want the lease handed over", ok, err)
			}
		}
		release(holder, w1)
		if _, live := queuedUntil(t, db, region, "k"); !live {
			t.Fatal("the flag is not live after the first hand-off, with the second waiter still queued")
		}
		release(w1, w2)
		if set, _ := queuedUntil(t, db, region, "k"); set {
			t.Fatal("the flag is still set after the last waiter was served")
		}
		if err := w2.Release(ctx, "k"); err != nil {
			t.Fatal(err)
		}
	})
}

// A waiter that gives up (Leave) while a release hands it the lease gives
// the lease back: Leave waits for the release's row lock and sees the
// handed lease on the row's latest version.
func TestALeaveWhileAReleaseHandsTheLeaseOverGivesItBack(t *testing.T) {
	forEachPostgres(t, func(t *testing.T, db testDB, l jdbc.Listener) {
		region := randomRegion()
		ctx := t.Context()
		holder := longPlacesRepo(t, db, region, l)
		waiter := longPlacesRepo(t, db, region, l)
		mustAcquire(t, holder, "k", longTTL)
		mustQueue(t, waiter, "k", longTTL)
		// The release hands the lease over and then waits to delete the
		// waiter's place, which another transaction holds; meanwhile the
		// waiter leaves.
		c := db.conn(t)
		var blocker int64
		if err := c.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&blocker); err != nil {
			t.Fatal(err)
		}
		tx, err := c.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		if _, err := tx.ExecContext(ctx, `SELECT 1 FROM INT_LOCK_WAIT WHERE REGION = $1 AND LOCK_KEY = $2 FOR UPDATE`,
			region, jdbc.UUIDKey("k")); err != nil {
			t.Fatal(err)
		}
		released := make(chan error, 1)
		go func() { released <- holder.Release(context.Background(), "k") }()
		rel := blockedBy(t, db, blocker)
		left := make(chan error, 1)
		go func() { left <- waiter.Leave(context.Background(), "k") }()
		blockedBy(t, db, rel) // the Leave waits for the release's row lock
		tx.Rollback()
		if err := <-released; err != nil {
			t.Fatalf("Release: %v", err)
		}
		if err := <-left; err != nil {
			t.Fatalf("Leave: %v", err)
		}
		if lease, found := db.Lease(t, table, region, jdbc.UUIDKey("k")); found && lease.Remaining > 0 {
			t.Fatalf("after the waiter left, the row is %+v: the lease handed to it was not given back", lease)
		}
		// Anybody may take it now.
		if _, ok, err := newRepo(t, db, jdbc.WithRegion(region)).Acquire(ctx, "k", longTTL); err != nil || !ok {
			t.Fatalf("Acquire after the waiter left = %v, %v; want the lease", ok, err)
		}
	})
}

// The clean-up keeps a dead row while its has-waiters flag is live: deleted
// and inserted again, the row would start without the flag, and its first
// release would not look for the waiters still queued.
func TestDeleteExpiredKeepsADeadRowWhileItsWaitersFlagIsLive(t *testing.T) {
	forEachPostgres(t, func(t *testing.T, db testDB, l jdbc.Listener) {
		region := randomRegion()
		repo := newRepo(t, db, jdbc.WithRegion(region), jdbc.WithKeyMapping(identity), jdbc.WithoutCleanup())
		long := db.Now(t).Add(-2 * time.Hour)
		db.InsertRows(t, table, lockColumns, db.lockRows("dead", region, 2, long))
		db.Exec(t, `UPDATE INT_LOCK SET QUEUED_UNTIL = timezone('UTC', now()) + INTERVAL '1 hour' WHERE REGION = ? AND LOCK_KEY = ?`,
			region, "dead-0")
		db.Exec(t, `UPDATE INT_LOCK SET QUEUED_UNTIL = timezone('UTC', now()) - INTERVAL '1 hour' WHERE REGION = ? AND LOCK_KEY = ?`,
			region, "dead-1")
		if _, err := repo.DeleteExpired(t.Context()); err != nil {
			t.Fatal(err)
		}
		if _, found := db.Lease(t, table, region, "dead-0"); !found {
			t.Fatal("DeleteExpired deleted a dead row whose waiters flag is live")
		}
		if _, found := db.Lease(t, table, region, "dead-1"); found {
			t.Fatal("DeleteExpired kept a dead row whose waiters flag has lapsed")
		}
	})
}

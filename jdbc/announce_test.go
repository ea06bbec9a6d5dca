package jdbc_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/lockreg/lockreg/jdbc"
)

// A hand-off's announcement carries its lease: the waiter it wakes takes the
// lease without a statement when the announcement is newer than its queue
// statement, and reads the row otherwise.

// handedSelect is the first words of the statement that reads a handed
// lease.
const handedSelect = "SELECT FENCE, CAST(EXTRACT(EPOCH"

// announcedWaiter is a waiter of region whose statements g counts, woken on
// woken once its listener listens.
func announcedWaiter(t *testing.T, db testDB, region string, l jdbc.Listener) (*jdbc.LockRepository, *gatedDB, chan struct{}) {
	t.Helper()
	g := newGatedDB(db.DB)
	waiter := newRepoOn(t, g, jdbc.WithRegion(region), jdbc.WithListener(l), jdbc.WithQueueTTL(longTTL),
		jdbc.WithoutPreparedStatements())
	woken := make(chan struct{}, 1)
	t.Cleanup(waiter.Notify("k", woken))
	awaitWake(t, woken) // every session's start wakes the waiters
	return waiter, g, woken
}

func awaitWake(t *testing.T, woken <-chan struct{}) {
	t.Helper()
	select {
	case <-woken:
	case <-time.After(time.Minute):
		t.Fatal("the waiter was not woken within a minute")
	}
}

func TestAWaiterWokenByAHandOffTakesTheLeaseWithoutAStatement(t *testing.T) {
	forEachPostgres(t, func(t *testing.T, db testDB, l jdbc.Listener) {
		ctx := t.Context()
		region := randomRegion()
		holder := longPlacesRepo(t, db, region, l)
		waiter, g, woken := announcedWaiter(t, db, region, l)
		mustAcquire(t, holder, "k", longTTL)
		mustQueue(t, waiter, "k", longTTL)
		if err := holder.Release(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		awaitWake(t, woken)
		before := g.count(handedSelect)
		lease, ok, err := waiter.HandedLease(ctx, "k")
		if err != nil || !ok {
			t.Fatalf("HandedLease = %v, %v; want the handed lease", ok, err)
		}
		if n := g.count(handedSelect) - before; n != 0 {
			t.Errorf("HandedLease sent %d SELECTs of the row; want none, the announcement carries the lease", n)
		}
		row, _ := db.Lease(t, table, region, jdbc.UUIDKey("k"))
		if row.ClientID != waiter.ClientID() || lease.Token != row.Fence {
			t.Errorf("HandedLease = token %d; the row is %s's with token %d; want the waiter's (%s) with that token",
				lease.Token, row.ClientID, row.Fence, waiter.ClientID())
		}
		if lease.TTL <= 0 || lease.TTL > longTTL {
			t.Errorf("HandedLease's TTL = %v; want in (0, %v]", lease.TTL, longTTL)
		}
	})
}

func TestAnAnnouncementNoNewerThanTheWaitersQueueStatementIsCheckedOnTheRow(t *testing.T) {
	forEachPostgres(t, func(t *testing.T, db testDB, l jdbc.Listener) {
		ctx := t.Context()
		region := randomRegion()
		holder := longPlacesRepo(t, db, region, l)
		waiter, g, _ := announcedWaiter(t, db, region, l)
		mustAcquire(t, holder, "k", longTTL)
		mustQueue(t, waiter, "k", longTTL)
		// A late announcement of an earlier hand-off to the waiter has a
		// token no greater than the one its queue statement found.
		row, _ := db.Lease(t, table, region, jdbc.UUIDKey("k"))
		jdbc.Announce(waiter, jdbc.UUIDKey("k")+" "+waiter.ClientID()+"\x1f"+strconv.FormatInt(row.Fence, 10)+
			"\x1f"+strconv.FormatInt(longTTL.Microseconds(), 10))
		before := g.count(handedSelect)
		if _, ok, err := waiter.HandedLease(ctx, "k"); err != nil || ok {
			t.Fatalf("HandedLease after a stale announcement, while the holder holds the lease = %v, %v; want false, nil", ok, err)
		}
		if n := g.count(handedSelect) - before; n != 1 {
			t.Errorf("HandedLease sent %d SELECTs of the row; want 1", n)
		}
	})
}

// A release that waits for the row behind a waiter's queue statement starts
// the lease it hands over only once it has the row, so that the waiter's
// reckoning from its statement (see HandedLease) never outlasts the lease.
func TestAHandedLeaseRunsFromWhenTheReleaseGotTheRowNotFromWhenItBegan(t *testing.T) {
	forEachPostgres(t, func(t *testing.T, db testDB, l jdbc.Listener) {
		ctx := t.Context()
		region := randomRegion()
		first := longPlacesRepo(t, db, region, l)
		holder := longPlacesRepo(t, db, region, l)
		waiter := longPlacesRepo(t, db, region, l)
		mustAcquire(t, first, "k", longTTL)
		// The holder's lease is a handed one, so its release goes
		// straight to the hand-off statement.
		mustQueue(t, holder, "k", longTTL)
		if err := first.Release(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		if _, ok, err := holder.HandedLease(ctx, "k"); err != nil || !ok {
			t.Fatalf("HandedLease = %v, %v; want the handed lease", ok, err)
		}
		mustQueue(t, waiter, "k", longTTL)

		// Another statement writes the row, as a queue statement does, and
		// holds it while the release begins.
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
		if _, err := tx.ExecContext(ctx, `UPDATE `+table+` SET QUEUED_UNTIL = QUEUED_UNTIL WHERE REGION = $1 AND LOCK_KEY = $2`,
			region, jdbc.UUIDKey("k")); err != nil {
			t.Fatal(err)
		}
		released := make(chan error, 1)
		go func() { released <- holder.Release(context.Background(), "k") }()
		db.waitBlocked(t, blocker)
		written, err := db.Clock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if err := <-released; err != nil {
			t.Fatal(err)
		}

		row, _ := db.Lease(t, table, region, jdbc.UUIDKey("k"))
		if row.ClientID != waiter.ClientID() {
			t.Fatalf("after the release the row is %s's; want the waiter's (%s)", row.ClientID, waiter.ClientID())
		}
		if want := written + longTTL.Microseconds(); row.Expires < want {
			t.Errorf("the handed lease expires at %d µs; want at least %d, a full lease from after the other write (%v short)",
				row.Expires, want, time.Duration(want-row.Expires)*time.Microsecond)
		}
	})
}

// Releases of lockreg before hand-offs carried their lease announce
// "LOCK_KEY CLIENT_ID" alone.
func TestAnAnnouncementWithoutTheLeaseWakesTheWaiterWhoReadsTheRow(t *testing.T) {
	forEachPostgres(t, func(t *testing.T, db testDB, l jdbc.Listener) {
		ctx := t.Context()
		region := randomRegion()
		holder := longPlacesRepo(t, db, region, l)
		waiter, g, woken := announcedWaiter(t, db, region, l)
		mustAcquire(t, holder, "k", longTTL)
		mustQueue(t, waiter, "k", longTTL)
		jdbc.Announce(waiter, jdbc.UUIDKey("k")+" "+waiter.ClientID())
		awaitWake(t, woken)
		before := g.count(handedSelect)
		if _, ok, err := waiter.HandedLease(ctx, "k"); err != nil || ok {
			t.Fatalf("HandedLease while the holder holds the lease = %v, %v; want false, nil", ok, err)
		}
		if n := g.count(handedSelect) - before; n != 1 {
			t.Errorf("HandedLease sent %d SELECTs of the row; want 1", n)
		}
	})
}

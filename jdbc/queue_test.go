package jdbc_test

import (
	"context"
	"testing"

	"github.com/lockreg/lockreg/jdbc"
)

// A waiter's place in the queue is a hint for the order of service, so
// its statement commits without waiting for the log flush; a statement
// that takes a lease commits as the server is configured. The statements
// run here inside a transaction opened on the repository's only
// connection, so that the setting they leave for their transaction can be
// read before it ends.
func TestAQueuedPlaceCommitsAsynchronouslyAndATakenLeaseDurably(t *testing.T) {
	forEachPostgres(t, func(t *testing.T, db testDB, l jdbc.Listener) {
		ctx := t.Context()
		region := randomRegion()
		holder := longPlacesRepo(t, db, region, l)
		conn := db.conn(t)
		waiter := newRepoOn(t, conn, jdbc.WithRegion(region), jdbc.WithListener(l), jdbc.WithQueueTTL(longTTL))
		var configured string
		if err := conn.QueryRowContext(ctx, `SHOW synchronous_commit`).Scan(&configured); err != nil {
			t.Fatal(err)
		}
		if configured == "off" {
			t.Skip("the server's synchronous_commit is off: every commit is asynchronous")
		}
		inTx := func(f func()) string {
			t.Helper()
			if _, err := conn.ExecContext(ctx, `BEGIN`); err != nil {
				t.Fatal(err)
			}
			f()
			var got string
			if err := conn.QueryRowContext(ctx, `SELECT current_setting('synchronous_commit')`).Scan(&got); err != nil {
				t.Fatal(err)
			}
			if _, err := conn.ExecContext(ctx, `COMMIT`); err != nil {
				t.Fatal(err)
			}
			return got
		}

		if _, ok, err := holder.Acquire(ctx, "k", longTTL); err != nil || !ok {
			t.Fatalf("Acquire = %v, %v", ok, err)
		}
		got := inTx(func() {
			if _, ok, err := waiter.AcquireOrWait(ctx, "k", longTTL); err != nil || ok {
				t.Fatalf("AcquireOrWait of the held lease = %v, %v; want false, nil (queued)", ok, err)
			}
		})
		if got != "off" {
			t.Errorf("after queueing, the transaction's synchronous_commit = %q; want off", got)
		}
		if err := holder.Release(context.Background(), "k"); err != nil {
			t.Fatal(err)
		}
		got = inTx(func() {
			if _, ok, err := waiter.AcquireOrWait(ctx, "k", longTTL); err != nil || !ok {
				t.Fatalf("AcquireOrWait after the release = %v, %v; want true, nil", ok, err)
			}
		})
		if got != configured {
			t.Errorf("after taking the lease, the transaction's synchronous_commit = %q; want the server's %q", got, configured)
		}
	})
}

// A place that a release serves, or that its waiter's own statement takes
// the lease from, lapses in place: the row stays, no longer live, and the
// client's next place is the same row again, with a new start.
func TestAServedPlaceLapsesInPlaceAndTheNextPlaceReusesItsRow(t *testing.T) {
	forEachPostgres(t, func(t *testing.T, db testDB, l jdbc.Listener) {
		ctx := t.Context()
		region := randomRegion()
		a := longPlacesRepo(t, db, region, l)
		b := longPlacesRepo(t, db, region, l)
		lockKey := jdbc.UUIDKey("k")
		places := func() (rows, live int) {
			t.Helper()
			err := db.DB.QueryRowContext(ctx, `SELECT count(*), count(*) FILTER (WHERE WAITING_UNTIL >= timezone('UTC', now())) `+
				`FROM INT_LOCK_WAIT WHERE REGION = $1 AND LOCK_KEY = $2`, region, lockKey).Scan(&rows, &live)
			if err != nil {
				t.Fatal(err)
			}
			return rows, live
		}
		since := func(client string) (s string) {
			t.Helper()
			err := db.DB.QueryRowContext(ctx, `SELECT CAST(WAITING_SINCE AS TEXT) FROM INT_LOCK_WAIT `+
				`WHERE REGION = $1 AND LOCK_KEY = $2 AND CLIENT_ID = $3`, region, lockKey, client).Scan(&s)
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
		handOver := func(from, to *jdbc.LockRepository) {
			t.Helper()
			if _, ok, err := to.AcquireOrWait(ctx, "k", longTTL); err != nil || ok {
				t.Fatalf("AcquireOrWait of the held lease = %v, %v; want false, nil (queued)", ok, err)
			}
			if err := from.Release(ctx, "k"); err != nil {
				t.Fatal(err)
			}
			if _, ok, err := to.HandedLease(ctx, "k"); err != nil || !ok {
				t.Fatalf("HandedLease = %v, %v; want the handed lease", ok, err)
			}
		}

		if _, ok, err := a.Acquire(ctx, "k", longTTL); err != nil || !ok {
			t.Fatalf("Acquire = %v, %v", ok, err)
		}
		handOver(a, b)
		if rows, live := places(); rows != 1 || live != 0 {
			t.Fatalf("after serving b's place: %d place rows, %d live; want 1 row, lapsed", rows, live)
		}
		first := since(b.ClientID())
		handOver(b, a)
		handOver(a, b)
		if rows, live := places(); rows != 2 || live != 0 {
			t.Fatalf("after three hand-offs between two clients: %d place rows, %d live; want 2 rows, both lapsed", rows, live)
		}
		if again := since(b.ClientID()); again == first {
			t.Fatalf("b's second place kept the first one's start %s; want a new start", first)
		}
	})
}

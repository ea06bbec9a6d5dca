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
			t.Skip("requires a server whose synchronous_commit is on: this one's is off, so every commit is asynchronous " +
				"and the queue statement's setting cannot be told apart")
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

		mustAcquire(t, holder, "k", longTTL)
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

package sqlstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/lockreg/lockreg/groupstore"
	"github.com/lockreg/lockreg/groupstore/sqlstore"
	"github.com/lockreg/lockreg/internal/telemetry/telemetrytest"
	"github.com/lockreg/lockreg/internal/testdb"
	"github.com/lockreg/lockreg/jdbc"
)

// groupLease is the LOCK_KEY of the clean-up's lease.
var groupLease = jdbc.UUIDKey("lockreg cleanup INT_GROUP")

var (
	groupColumns = []string{"GROUP_KEY", "REGION", "CORRELATION_KEY", "GROUP_ID", "COMPLETE", "LAST_RELEASED_SEQUENCE",
		"RELEASES", "MESSAGE_COUNT", "LAST_POSITION", "VERSION", "DUE_AT", "CLAIMED_UNTIL", "CREATED_DATE", "UPDATED_DATE"}
	messageColumns = []string{"GROUP_KEY", "REGION", "MESSAGE_KEY", "MESSAGE_ID", "POSITION", "RELEASED", "METADATA",
		"PAYLOAD", "CREATED_DATE"}
)

// groupRows is a set of groups to insert with their message rows.
type groupRows struct{ groups, messages [][]any }

// add appends n groups prefix-0, prefix-1, ... in region that last changed
// at updated, each with messages message rows of which unreleased are not
// released, complete or not, due at due (nil for no due time).
func (r *groupRows) add(db testdb.Backend, prefix, region string, n int, complete bool, messages, unreleased int, due any, updated time.Time) {
	c := 0
	if complete {
		c = 1
	}
	for i := range n {
		key := fmt.Sprintf("%s-%d", prefix, i)
		r.groups = append(r.groups, []any{key, region, key, key, c, 0, 1, unreleased, messages, 3, due, nil,
			db.At(updated.Add(-time.Minute)), db.At(updated)})
		for j := range messages {
			released := 1
			if j < unreleased {
				released = 0
			}
			r.messages = append(r.messages, []any{key, region, fmt.Sprintf("m-%d", j), fmt.Sprintf("%s-m%d", key, j), j + 1,
				released, nil, nil, db.At(updated.Add(-time.Minute))})
		}
	}
}

func TestGroupCleanupLeavesOnlyLiveGroups(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, db testdb.Backend) {
		region, other := testdb.RandomRegion(), testdb.RandomRegion()
		now := db.Now(t)
		old := now.Add(-2 * time.Hour)
		var rows groupRows
		rows.add(db, "done", region, 2000, true, 2, 0, nil, old)
		rows.add(db, "open", region, 100, false, 2, 2, nil, old)
		rows.add(db, "drained", region, 50, false, 2, 0, nil, old) // open, all released so far (a resequencer's)
		rows.add(db, "due", region, 50, true, 2, 0, db.At(now.Add(time.Hour)), old)
		rows.add(db, "overdue", region, 50, true, 2, 0, db.At(old), old)
		rows.add(db, "unreleased", region, 50, true, 2, 1, nil, old)
		rows.add(db, "recent", region, 100, true, 2, 0, nil, now.Add(-time.Minute))
		rows.add(db, "done", other, 50, true, 2, 0, nil, old)
		db.InsertRows(t, "INT_GROUP", groupColumns, rows.groups)
		db.InsertRows(t, "INT_GROUP_MESSAGE", messageColumns, rows.messages)

		spy := testdb.NewSpy(db.DB, groupLease)
		store := newStore(t, spy, sqlstore.Config{Region: region, CleanupRetention: time.Hour, CleanupInterval: 20 * time.Millisecond})
		// A group completed through the API, within the retention.
		ctx := context.Background()
		for _, id := range []string{"a", "b"} {
			if _, _, err := store.Add(ctx, "completed", groupstore.Message{UUID: id}, 0); err != nil {
				t.Fatal(err)
			}
		}
		if err := store.Update(ctx, "completed", groupstore.Update{ReleaseAll: true, Complete: true}); err != nil {
			t.Fatal(err)
		}
		testdb.WaitFor(t, "the clean-up of the finished groups", func() bool {
			return db.CountRows(t, "INT_GROUP", "GROUP_KEY", region, "done") == 0 &&
				db.CountRows(t, "INT_GROUP_MESSAGE", "GROUP_KEY", region, "done") == 0
		})
		spy.NextPass(t)

		for _, c := range []struct {
			region, prefix   string
			groups, messages int
		}{
			{region, "open", 100, 200}, {region, "drained", 50, 100}, {region, "due", 50, 100}, {region, "overdue", 50, 100},
			{region, "unreleased", 50, 100}, {region, "recent", 100, 200}, {other, "done", 50, 100},
		} {
			if n := db.CountRows(t, "INT_GROUP", "GROUP_KEY", c.region, c.prefix); n != c.groups {
				t.Errorf("%d groups %s-* left; want %d", n, c.prefix, c.groups)
			}
			if n := db.CountRows(t, "INT_GROUP_MESSAGE", "GROUP_KEY", c.region, c.prefix); n != c.messages {
				t.Errorf("%d message rows of groups %s-* left; want %d", n, c.prefix, c.messages)
			}
		}
		if _, outcome, err := store.Add(ctx, "completed", groupstore.Message{UUID: "a"}, 0); err != nil || outcome != groupstore.Duplicate {
			t.Errorf("a redelivery to the group completed within the retention: %v, %v; want %v", outcome, err, groupstore.Duplicate)
		}
		spy.WantBatched(t, "INT_GROUP", 2000)
		spy.WantBatched(t, "INT_GROUP_MESSAGE", 4000)
	})
}

// After the retention a completed group is forgotten: a redelivery of one
// of its messages starts a new group. This is the documented trade-off.
func TestGroupCleanupForgetsAGroupAfterTheRetention(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, db testdb.Backend) {
		region := testdb.RandomRegion()
		store := newStore(t, db.DB, sqlstore.Config{Region: region, CleanupRetention: time.Second, CleanupInterval: 10 * time.Millisecond})
		ctx := context.Background()
		if _, _, err := store.Add(ctx, "g", groupstore.Message{UUID: "m"}, 0); err != nil {
			t.Fatal(err)
		}
		if err := store.Update(ctx, "g", groupstore.Update{ReleaseAll: true, Complete: true}); err != nil {
			t.Fatal(err)
		}
		testdb.WaitFor(t, "the clean-up of the completed group", func() bool {
			_, err := store.Get(ctx, "g")
			return errors.Is(err, groupstore.ErrNotFound)
		})
		if n := db.CountRows(t, "INT_GROUP_MESSAGE", "GROUP_KEY", region, ""); n != 0 {
			t.Errorf("%d message rows left after their group was deleted; want 0", n)
		}
		if _, outcome, err := store.Add(ctx, "g", groupstore.Message{UUID: "m"}, 0); err != nil || outcome != groupstore.Added {
			t.Errorf("the message again after the retention: %v, %v; want %v", outcome, err, groupstore.Added)
		}
	})
}

func TestDeleteCompletedDeletesOnlyFinishedGroups(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, db testdb.Backend) {
		store := newStore(t, db.DB, sqlstore.Config{DisableCleanup: true})
		ctx := context.Background()
		for _, key := range []string{"open", "done"} {
			if _, _, err := store.Add(ctx, key, groupstore.Message{UUID: "m"}, 0); err != nil {
				t.Fatal(err)
			}
		}
		if err := store.Update(ctx, "done", groupstore.Update{ReleaseAll: true, Complete: true}); err != nil {
			t.Fatal(err)
		}
		if n, err := store.DeleteCompleted(ctx, 0); err != nil || n != 1 {
			t.Fatalf("DeleteCompleted = %d, %v; want 1, nil", n, err)
		}
		if _, err := store.Get(ctx, "open"); err != nil {
			t.Errorf("the open group: %v", err)
		}
		if _, err := store.Get(ctx, "done"); !errors.Is(err, groupstore.ErrNotFound) {
			t.Errorf("the completed group: %v; want ErrNotFound", err)
		}
	})
}

func TestCloseStopsTheCleanup(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, db testdb.Backend) {
		before := goleak.IgnoreCurrent()
		spy := testdb.NewSpy(db.DB, groupLease)
		store, err := sqlstore.New(spy, sqlstore.Config{Region: testdb.RandomRegion(), CleanupRetention: time.Minute,
			CleanupInterval: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := store.Add(context.Background(), "g", groupstore.Message{UUID: "m"}, 0); err != nil {
			t.Fatal(err)
		}
		testdb.WaitFor(t, "a clean-up pass", func() bool { return spy.Tries() > 0 })
		if err := store.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		goleak.VerifyNone(t, append(testdb.DriverGoroutines(), before)...)
	})
}

func TestDisableCleanupStartsNoGoroutine(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, db testdb.Backend) {
		before := goleak.IgnoreCurrent()
		store := newStore(t, db.DB, sqlstore.Config{DisableCleanup: true})
		if _, _, err := store.Add(context.Background(), "g", groupstore.Message{UUID: "m"}, 0); err != nil {
			t.Fatal(err)
		}
		goleak.VerifyNone(t, append(testdb.DriverGoroutines(), before)...)
	})
}

// The clean-up's errors go to Config.Logger with the store's region and
// backend.
func TestCleanupErrorsAreLoggedWithRegionAndBackend(t *testing.T) {
	db := testdb.SQLite(t)
	var buf telemetrytest.Buffer
	region := testdb.RandomRegion()
	s := newStore(t, db.DB, sqlstore.Config{Prefix: "NOPE_", Region: region, CleanupInterval: 10 * time.Millisecond,
		Logger: buf.Logger()})
	// The first Add starts the clean-up; it fails, as its tables are missing.
	if _, _, err := s.Add(context.Background(), "k", groupstore.Message{UUID: "m1"}, 0); !errors.Is(err, sqlstore.ErrNoTable) {
		t.Fatalf("Add: %v, want ErrNoTable", err)
	}
	testdb.WaitFor(t, "a logged clean-up failure", func() bool { return strings.Contains(buf.String(), "sqlstore") })
	for _, want := range []string{"region=" + region, "backend=sqlite", "level=ERROR"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("record %q lacks %q", buf.String(), want)
		}
	}
}

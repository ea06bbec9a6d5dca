package resequencer_test

import (
	"context"
	"testing"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/lockreg/lockreg/groupstore/sqlstore"
	"github.com/lockreg/lockreg/internal/testdb"
	"github.com/lockreg/lockreg/resequencer"
)

// A resequencer whose store is an outbox publishes each released run in
// the transaction that records it: every message once, redeliveries
// included.
func TestResequencerWithAnOutboxPublishesEachMessageOnce(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, db testdb.Backend) {
		ctx := context.Background()
		region := testdb.RandomRegion()
		store, err := sqlstore.New(db.DB, sqlstore.Config{Region: region})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { store.Close(context.Background()) })
		ob, err := sqlstore.NewOutbox(store, db.RowPublishers(t, region, nil))
		if err != nil {
			t.Fatal(err)
		}
		rs, err := resequencer.New(resequencer.Config{OutputTopic: "out", Store: ob, ReleasePartialSequences: true,
			Logger: watermill.NopLogger{}})
		if err != nil {
			t.Fatalf("a resequencer on an outbox needs no Publisher: %v", err)
		}
		for _, seq := range []int{2, 1, 1, 3, 2} {
			m := part("k", seq, 3)
			m.SetContext(ctx)
			if err := rs.Handle(m); err != nil {
				t.Fatal(err)
			}
		}
		if got := db.Published(t, region, "out"); len(got) != 3 {
			t.Errorf("published %d messages, want 3", len(got))
		}
	})
}

package aggregator_test

import (
	"context"
	"sync"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/lockreg/lockreg/aggregator"
	"github.com/lockreg/lockreg/groupstore"
	"github.com/lockreg/lockreg/groupstore/sqlstore"
	"github.com/lockreg/lockreg/internal/testdb"
	"github.com/lockreg/lockreg/internal/testpub"
)

// beforeLocked is a store that runs before once, at its first Locked
// call, before it locks: another instance's handling between a message's
// Add and its handler's Locked step.
type beforeLocked struct {
	*sqlstore.Store
	once   sync.Once
	before func()
}

func (s *beforeLocked) Locked(ctx context.Context, key string, fn func(context.Context, groupstore.Store) error) error {
	s.once.Do(s.before)
	return s.Store.Locked(ctx, key, fn)
}

// A message added to a group that another instance then releases, with the
// message, and removes (ExpireGroupsOnCompletion) before the message's own
// Locked step is done: it must not be redelivered, which would put it in a
// new group and release it twice.
func TestAMessageWhoseGroupAnotherInstanceReleasedAndRemovedAfterItsAddIsDone(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, db testdb.Backend) {
		ctx := context.Background()
		region := testdb.RandomRegion()
		pub := testpub.NewRecorder()
		store := func() *sqlstore.Store {
			s, err := sqlstore.New(db.DB, sqlstore.Config{Region: region})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close(ctx) })
			return s
		}
		newAggregator := func(s groupstore.Store) *aggregator.Aggregator {
			a, err := aggregator.New(aggregator.Config{Publisher: pub, OutputTopic: "out", DiscardTopic: "discard",
				Store: s, Release: aggregator.ReleaseOnCount(2), ExpireGroupsOnCompletion: true, Logger: watermill.NopLogger{}})
			if err != nil {
				t.Fatal(err)
			}
			return a
		}
		msg := func(id string) *message.Message {
			m := message.NewMessage(id, []byte(id))
			m.Metadata.Set(aggregator.CorrelationIDKey, "g")
			return m
		}
		other := newAggregator(store())
		if err := other.Handle(msg("y")); err != nil {
			t.Fatal(err)
		}
		hooked := &beforeLocked{Store: store()}
		hooked.before = func() {
			if err := other.Handle(msg("y")); err != nil { // a redelivery of y: it releases y and x
				t.Error(err)
			}
		}
		if err := newAggregator(hooked).Handle(msg("x")); err != nil {
			t.Errorf("Handle(x) = %v, want nil: the group was released with x", err)
		}
		if out := pub.On("out"); len(out) != 1 {
			t.Errorf("%d outputs, want 1", len(out))
		}
		if _, err := hooked.Get(ctx, "g"); err == nil {
			t.Error("the group exists: a removed group was made again")
		}
	})
}

package aggregator_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/lockreg/lockreg/aggregator"
	"github.com/lockreg/lockreg/groupstore/sqlstore"
	"github.com/lockreg/lockreg/internal/testdb"
	"github.com/lockreg/lockreg/internal/testpub"
	"github.com/lockreg/lockreg/jdbc"
	"github.com/lockreg/lockreg/registry"
)

// instance is one aggregator "process": its own lock repository, registry
// and SQL store (package sqlstore) on the shared database and region.
func instance(t *testing.T, db testdb.Backend, region string, pub message.Publisher, timeout time.Duration) *aggregator.Aggregator {
	t.Helper()
	return newInstance(t, db, region, pub, timeout, true)
}

// newInstance is instance, with a registry as Locks or, without
// withLocks, none: the store's row locks protect the groups.
func newInstance(t *testing.T, db testdb.Backend, region string, pub message.Publisher, timeout time.Duration, withLocks bool) *aggregator.Aggregator {
	t.Helper()
	repo, err := jdbc.NewLockRepository(context.Background(), db.DB, jdbc.WithRegion(region))
	if err != nil {
		t.Fatal(err)
	}
	locks, err := registry.New(repo)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { locks.Close(context.Background()) })
	store, err := sqlstore.New(db.DB, sqlstore.Config{Region: region})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close(context.Background()) })
	var groupLocks registry.LockRegistry = locks
	if !withLocks {
		groupLocks = nil
	}
	a, err := aggregator.New(aggregator.Config{Publisher: pub, OutputTopic: "out", DiscardTopic: "discard",
		Store: store, Locks: groupLocks, GroupTimeout: timeout, PollInterval: 10 * time.Millisecond, Logger: watermill.NopLogger{}})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestAggregatorInstancesSharingASQLStoreReleaseEachGroupOnce has two
// instances handle every message of every group concurrently, as competing
// consumers that both get each message.
func TestAggregatorInstancesSharingASQLStoreReleaseEachGroupOnce(t *testing.T) {
	testSharedStoreReleasesOnce(t, true)
}

// TestAggregatorInstancesLockedByTheirSQLStoreReleaseEachGroupOnce: the
// same without Locks, the store's row locks taking turns.
func TestAggregatorInstancesLockedByTheirSQLStoreReleaseEachGroupOnce(t *testing.T) {
	testSharedStoreReleasesOnce(t, false)
}

func testSharedStoreReleasesOnce(t *testing.T, withLocks bool) {
	testdb.ForEach(t, func(t *testing.T, db testdb.Backend) {
		region := testdb.RandomRegion()
		pub := testpub.NewRecorder()
		a, b := newInstance(t, db, region, pub, time.Hour, withLocks), newInstance(t, db, region, pub, time.Hour, withLocks)
		const groups, size = 10, 3
		var wg sync.WaitGroup
		for _, agg := range []*aggregator.Aggregator{a, b} {
			for g := range groups {
				wg.Go(func() {
					for i := size; i >= 1; i-- {
						m := part(fmt.Sprintf("g%d", g), i, size)
						// A nack is redelivered, as a subscriber would.
						var err error
						for range 100 {
							if err = agg.Handle(m); err == nil {
								break
							}
						}
						if err != nil {
							t.Errorf("Handle(%s) keeps failing: %v", m.UUID, err)
							return
						}
					}
				})
			}
		}
		wg.Wait()
		if n := len(pub.On("out")); n != groups {
			t.Errorf("%d outputs for %d groups", n, groups)
		}
		if n := len(pub.On("discard")); n != 0 {
			t.Errorf("%d discards", n)
		}
	})
}

// TestGroupTimeoutFiresOnAnotherInstance: the instance that received a
// group's messages runs no timeout runner (it died); another instance's
// runner expires the group.
func TestGroupTimeoutFiresOnAnotherInstance(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, db testdb.Backend) {
		region := testdb.RandomRegion()
		pub := testpub.NewRecorder()
		dead := instance(t, db, region, pub, 50*time.Millisecond)
		for i := 1; i <= 2; i++ {
			if err := dead.Handle(part("lonely", i, 3)); err != nil {
				t.Fatal(err)
			}
		}
		alive := instance(t, db, region, pub, 50*time.Millisecond)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); alive.RunTimeouts(ctx) }()
		defer func() { cancel(); <-done }()
		deadline := time.Now().Add(10 * time.Second)
		for len(pub.On("discard")) < 2 {
			if time.Now().After(deadline) {
				t.Fatalf("discarded %d of 2", len(pub.On("discard")))
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err := alive.Handle(part("lonely", 3, 3)); err != nil {
			t.Fatal(err)
		}
		if len(pub.On("discard")) != 3 || len(pub.On("out")) != 0 {
			t.Errorf("discards %d, outputs %d; want 3 and 0", len(pub.On("discard")), len(pub.On("out")))
		}
	})
}

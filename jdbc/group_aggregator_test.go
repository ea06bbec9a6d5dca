package jdbc_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/lockreg/lockreg/aggregator"
	"github.com/lockreg/lockreg/jdbc"
	"github.com/lockreg/lockreg/registry"
)

// topicRecorder is a publisher that keeps messages by topic, in the order
// of Publish calls, as an ordered topic would.
type topicRecorder struct {
	mu   sync.Mutex
	msgs map[string][]*message.Message
}

func (r *topicRecorder) Publish(topic string, msgs ...*message.Message) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.msgs == nil {
		r.msgs = map[string][]*message.Message{}
	}
	r.msgs[topic] = append(r.msgs[topic], msgs...)
	return nil
}

func (r *topicRecorder) Close() error { return nil }

func (r *topicRecorder) count(topic string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.msgs[topic])
}

func (r *topicRecorder) on(topic string) []*message.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.msgs[topic])
}

// instance is one aggregator "process": its own lock repository, registry
// and store on the shared database and region.
func instance(t *testing.T, db testDB, region string, pub message.Publisher, timeout time.Duration) *aggregator.Aggregator {
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
	store, err := jdbc.NewGroupStore(db.DB, jdbc.WithRegion(region))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close(context.Background()) })
	a, err := aggregator.New(aggregator.Config{Publisher: pub, OutputTopic: "out", DiscardTopic: "discard",
		Store: store, Locks: locks, GroupTimeout: timeout, PollInterval: 10 * time.Millisecond, Logger: watermill.NopLogger{}})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func orderLine(key string, i, n int) *message.Message {
	m := message.NewMessage(fmt.Sprintf("%s-%d", key, i), []byte(strconv.Itoa(i)))
	m.Metadata.Set("correlation_id", key)
	m.Metadata.Set("sequence_size", strconv.Itoa(n))
	return m
}

// TestAggregatorInstancesSharingASQLStoreReleaseEachGroupOnce has two
// instances handle every message of every group concurrently, as competing
// consumers that both get each message.
func TestAggregatorInstancesSharingASQLStoreReleaseEachGroupOnce(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		region := randomRegion()
		pub := &topicRecorder{}
		a, b := instance(t, db, region, pub, time.Hour), instance(t, db, region, pub, time.Hour)
		const groups, size = 10, 3
		var wg sync.WaitGroup
		for _, agg := range []*aggregator.Aggregator{a, b} {
			for g := range groups {
				wg.Go(func() {
					for i := size; i >= 1; i-- {
						m := orderLine(fmt.Sprintf("g%d", g), i, size)
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
		if n := pub.count("out"); n != groups {
			t.Errorf("%d outputs for %d groups", n, groups)
		}
		if n := pub.count("discard"); n != 0 {
			t.Errorf("%d discards", n)
		}
	})
}

// TestGroupTimeoutFiresOnAnotherInstance: the instance that received a
// group's messages runs no timeout runner (it died); another instance's
// runner expires the group.
func TestGroupTimeoutFiresOnAnotherInstance(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		region := randomRegion()
		pub := &topicRecorder{}
		dead := instance(t, db, region, pub, 50*time.Millisecond)
		for i := 1; i <= 2; i++ {
			if err := dead.Handle(orderLine("lonely", i, 3)); err != nil {
				t.Fatal(err)
			}
		}
		alive := instance(t, db, region, pub, 50*time.Millisecond)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); alive.RunTimeouts(ctx) }()
		defer func() { cancel(); <-done }()
		deadline := time.Now().Add(10 * time.Second)
		for pub.count("discard") < 2 {
			if time.Now().After(deadline) {
				t.Fatalf("discarded %d of 2", pub.count("discard"))
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err := alive.Handle(orderLine("lonely", 3, 3)); err != nil {
			t.Fatal(err)
		}
		if pub.count("discard") != 3 || pub.count("out") != 0 {
			t.Errorf("discards %d, outputs %d; want 3 and 0", pub.count("discard"), pub.count("out"))
		}
	})
}

package aggregator_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/lockreg/lockreg/aggregator"
	"github.com/lockreg/lockreg/groupstore"
	"github.com/lockreg/lockreg/groupstore/sqlstore"
	"github.com/lockreg/lockreg/internal/testdb"
)

// forEachStore runs test on a memory store and on the SQL store of every
// backend (each in a region of its own).
func forEachStore(t *testing.T, test func(t *testing.T, store groupstore.Store)) {
	t.Run("memory", func(t *testing.T) { test(t, groupstore.NewMemory()) })
	testdb.ForEach(t, func(t *testing.T, db testdb.Backend) {
		store, err := sqlstore.New(db.DB, sqlstore.Config{Region: testdb.RandomRegion()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { store.Close(context.Background()) })
		test(t, store)
	})
}

// due returns the due time of group key in store.
func due(t *testing.T, store groupstore.Store, key string) time.Time {
	t.Helper()
	g, err := store.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return g.Due
}

func TestGroupTimeoutFuncIsCalledWithTheGroupAfterEachMessageThatDoesNotReleaseIt(t *testing.T) {
	type call struct {
		size   int
		latest string
	}
	var calls []call
	a, rec := newAgg(t, aggregator.Config{GroupTimeoutFunc: func(g groupstore.Group, latest *message.Message) time.Duration {
		if g.Key != "f" || g.Messages != nil {
			t.Errorf("group %+v", g)
		}
		calls = append(calls, call{g.Size, latest.UUID})
		return time.Hour
	}})
	handle(t, a, part("f", 2, 3), part("f", 1, 3), part("f", 3, 3))
	if len(rec.On("out")) != 1 {
		t.Fatalf("%d outputs", len(rec.On("out")))
	}
	want := []call{{1, "f-2"}, {2, "f-1"}} // not for the releasing message
	if len(calls) != len(want) || calls[0] != want[0] || calls[1] != want[1] {
		t.Errorf("calls %v, want %v", calls, want)
	}
}

func TestGroupTimeoutFuncPositiveResultSetsTheDueTimeAndZeroClearsIt(t *testing.T) {
	forEachStore(t, func(t *testing.T, store groupstore.Store) {
		a, _ := newAgg(t, aggregator.Config{Store: store, GroupTimeoutFunc: func(g groupstore.Group, _ *message.Message) time.Duration {
			if g.Size == 1 {
				return time.Hour
			}
			return 0 // no timeout, as Spring's null
		}})
		handle(t, a, part("z", 1, 3))
		if due(t, store, "z").IsZero() {
			t.Fatal("no due time after a positive result")
		}
		handle(t, a, part("z", 2, 3))
		if d := due(t, store, "z"); !d.IsZero() {
			t.Errorf("due %v after a zero result, want none", d)
		}
	})
}

func TestGroupTimeoutFuncResultExpiresTheGroupOnAnotherInstancesRunner(t *testing.T) {
	forEachStore(t, func(t *testing.T, store groupstore.Store) {
		short := func(g groupstore.Group, latest *message.Message) time.Duration {
			if latest.Metadata.Get("urgent") == "yes" {
				return time.Millisecond
			}
			return time.Hour
		}
		cfg := aggregator.Config{Store: store, GroupTimeoutFunc: short, DiscardTopic: "discard", PollInterval: 5 * time.Millisecond}
		dead, _ := newAgg(t, cfg)
		m := part("u", 2, 3)
		m.Metadata.Set("urgent", "yes")
		handle(t, dead, part("u", 1, 3), m)
		alive, rec := newAgg(t, cfg)
		runTimeouts(t, alive)
		if d := rec.WaitFor(t, "discard", 2); d[0].Metadata.Get(aggregator.DiscardReasonKey) != "expired" {
			t.Errorf("discard %v", d[0].Metadata)
		}
	})
}

func TestGroupTimeoutFuncNegativeResultExpiresTheGroupInHandle(t *testing.T) {
	forEachStore(t, func(t *testing.T, store groupstore.Store) {
		a, rec := newAgg(t, aggregator.Config{Store: store, SendPartialResultOnExpiry: true,
			GroupTimeoutFunc: func(g groupstore.Group, _ *message.Message) time.Duration {
				if g.Size >= 2 {
					return -1
				}
				return 0
			}})
		handle(t, a, part("n", 1, 5))
		if len(rec.On("out")) != 0 {
			t.Fatal("released after one message")
		}
		handle(t, a, part("n", 3, 5)) // no runner runs: Handle expired it
		out := rec.On("out")
		if len(out) != 1 || string(out[0].Payload) != `[{"item":1},{"item":3}]` {
			t.Fatalf("outputs %v, want the partial result", out)
		}
		g, err := store.Get(context.Background(), "n")
		if err != nil || !g.Complete {
			t.Errorf("group %+v, %v: want complete", g, err)
		}
	})
}

func TestGroupTimeoutAndGroupTimeoutFuncAreMutuallyExclusive(t *testing.T) {
	_, err := aggregator.New(aggregator.Config{Publisher: discardPub{}, OutputTopic: "out", GroupTimeout: time.Second,
		GroupTimeoutFunc: func(groupstore.Group, *message.Message) time.Duration { return time.Second }})
	if !errors.Is(err, aggregator.ErrInvalidConfig) {
		t.Errorf("New: %v, want ErrInvalidConfig", err)
	}
}

func TestReleaseOnTimeoutAcceptsAGroupTimeoutFunc(t *testing.T) {
	a, rec := newAgg(t, aggregator.Config{Release: aggregator.ReleaseOnTimeout(), PollInterval: 5 * time.Millisecond,
		GroupTimeoutFunc: func(groupstore.Group, *message.Message) time.Duration { return time.Millisecond }})
	handle(t, a, part("r", 1, 0))
	runTimeouts(t, a)
	if out := rec.WaitFor(t, "out", 1); string(out[0].Payload) != `[{"item":1}]` {
		t.Errorf("payload %s", out[0].Payload)
	}
}

// discardPub publishes nowhere.
type discardPub struct{}

func (discardPub) Publish(string, ...*message.Message) error { return nil }
func (discardPub) Close() error                              { return nil }

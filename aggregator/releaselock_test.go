package aggregator_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/lockreg/lockreg/aggregator"
	"github.com/lockreg/lockreg/groupstore"
	"github.com/lockreg/lockreg/groupstore/sqlstore"
	"github.com/lockreg/lockreg/internal/testdb"
	"github.com/lockreg/lockreg/internal/testpub"
	"github.com/lockreg/lockreg/registry"
)

// lockProbe is a publisher that records, for each Publish, whether the
// group lock of key was free (Spring's AggregatorTests check the same
// with checkLock), and can hold a Publish until told.
type lockProbe struct {
	locks registry.LockRegistry
	key   string

	mu      sync.Mutex
	free    []bool
	msgs    []*message.Message
	started chan struct{} // closed at the first Publish, when not nil
	proceed chan struct{} // the first Publish waits for it, when not nil
}

func (p *lockProbe) Publish(_ string, msgs ...*message.Message) error {
	l := p.locks.Obtain(p.key)
	ok, err := l.TryLockContext(context.Background()) // one attempt
	if err != nil {
		return err
	}
	if ok {
		l.Unlock()
	}
	p.mu.Lock()
	p.free = append(p.free, ok)
	p.msgs = append(p.msgs, msgs...)
	first := len(p.free) == 1
	p.mu.Unlock()
	if first && p.started != nil {
		close(p.started)
		<-p.proceed
	}
	return nil
}

func (*lockProbe) Close() error { return nil }

func (p *lockProbe) freeAtPublish() []bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]bool(nil), p.free...)
}

func TestOutputIsPublishedUnderTheGroupLockByDefault(t *testing.T) {
	locks := newLocal(t)
	probe := &lockProbe{locks: locks, key: aggregator.DefaultLockPrefix + "k"}
	a, _ := newAgg(t, aggregator.Config{Publisher: probe, Locks: locks})
	handle(t, a, part("k", 1, 2), part("k", 2, 2))
	if got := probe.freeAtPublish(); len(got) != 1 || got[0] {
		t.Errorf("lock free at publish: %v, want held", got)
	}
}

func TestReleaseLockBeforeSendPublishesWithTheGroupLockFree(t *testing.T) {
	locks := newLocal(t)
	probe := &lockProbe{locks: locks, key: aggregator.DefaultLockPrefix + "k"}
	a, _ := newAgg(t, aggregator.Config{Publisher: probe, Locks: locks, ReleaseLockBeforeSend: true})
	handle(t, a, part("k", 1, 2), part("k", 2, 2))
	if got := probe.freeAtPublish(); len(got) != 1 || !got[0] {
		t.Errorf("lock free at publish: %v, want free", got)
	}
}

func TestReleaseLockBeforeSendDiscardsAMessageThatArrivesWhileTheOutputIsInFlight(t *testing.T) {
	locks := newLocal(t)
	store := groupstore.NewMemory()
	probe := &lockProbe{locks: locks, key: aggregator.DefaultLockPrefix + "k",
		started: make(chan struct{}), proceed: make(chan struct{})}
	rec := testpub.NewRecorder()
	a, _ := newAgg(t, aggregator.Config{Publisher: probe, Locks: locks, Store: store, DiscardTopic: "discard",
		DiscardPublisher: rec, Release: aggregator.ReleaseOnCount(2), ReleaseLockBeforeSend: true})
	handle(t, a, part("k", 1, 0))
	done := make(chan error, 1)
	go func() { done <- a.Handle(part("k", 2, 0)) }()
	<-probe.started
	// The lock is free while the output is in flight: the third message
	// is handled at once, and it is late.
	handle(t, a, part("k", 3, 0))
	if d := rec.On("discard"); len(d) != 1 || d[0].Metadata.Get(aggregator.DiscardReasonKey) != "late" {
		t.Errorf("discards %v, want k-3 as late", d)
	}
	close(probe.proceed)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	g, err := store.Get(context.Background(), "k")
	if err != nil || !g.Complete || g.Size != 0 {
		t.Errorf("group %+v, %v: want released and complete", g, err)
	}
}

func TestReleaseLockBeforeSendRepublishesAFailedSendOnRedeliveryWithTheSameUUID(t *testing.T) {
	forEachStore(t, func(t *testing.T, store groupstore.Store) {
		a, rec := newAgg(t, aggregator.Config{Store: store, ReleaseLockBeforeSend: true})
		handle(t, a, part("f", 1, 2))
		rec.FailNext(1)
		if err := a.Handle(part("f", 2, 2)); err == nil {
			t.Fatal("Handle with a failing publish returned nil")
		}
		if g, err := store.Get(context.Background(), "f"); err != nil || !g.Complete || g.Size != 2 {
			t.Fatalf("group after the failed send %+v, %v: want closed with its 2 messages", g, err)
		}
		handle(t, a, part("f", 2, 2)) // the redelivery
		out := rec.On("out")
		if len(out) != 1 || out[0].UUID != rec.Failed()[0] {
			t.Fatalf("outputs %v (failed %v), want one with the failed one's UUID", out, rec.Failed())
		}
		if g, err := store.Get(context.Background(), "f"); err != nil || g.Size != 0 {
			t.Errorf("group %+v, %v: want released", g, err)
		}
	})
}

func TestReleaseLockBeforeSendUnfinishedSendIsFinishedByAnotherInstancesRunner(t *testing.T) {
	forEachStore(t, func(t *testing.T, store groupstore.Store) {
		cfg := aggregator.Config{Store: store, ReleaseLockBeforeSend: true, LockTimeout: 100 * time.Millisecond,
			PollInterval: 10 * time.Millisecond}
		dead, deadRec := newAgg(t, cfg)
		handle(t, dead, part("d", 1, 2))
		deadRec.FailNext(1)
		if err := dead.Handle(part("d", 2, 2)); err == nil {
			t.Fatal("Handle with a failing publish returned nil")
		}
		alive, rec := newAgg(t, cfg)
		runTimeouts(t, alive)
		out := rec.WaitFor(t, "out", 1)
		if out[0].UUID != deadRec.Failed()[0] || string(out[0].Payload) != `[{"item":1},{"item":2}]` {
			t.Errorf("output %s %s, want the failed one (%s)", out[0].UUID, out[0].Payload, deadRec.Failed()[0])
		}
	})
}

// With an outbox the send after the unlock is the transaction that
// records the release: a failed one leaves nothing behind, and the
// redelivery (or a runner) that finishes the release publishes the output
// once; the transaction is conditional on the closed group's version, so
// a second finisher would commit nothing.
func TestReleaseLockBeforeSendWithAnOutboxPublishesExactlyOnce(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, db testdb.Backend) {
		region := testdb.RandomRegion()
		store, err := sqlstore.New(db.DB, sqlstore.Config{Region: region})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { store.Close(context.Background()) })
		failing, err := sqlstore.NewOutbox(store, db.RowPublishers(t, region, errors.New("broker down")))
		if err != nil {
			t.Fatal(err)
		}
		working, err := sqlstore.NewOutbox(store, db.RowPublishers(t, region, nil))
		if err != nil {
			t.Fatal(err)
		}
		cfg := aggregator.Config{OutputTopic: "out", ReleaseLockBeforeSend: true, LockTimeout: 100 * time.Millisecond,
			PollInterval: 10 * time.Millisecond}
		cfg.Store = failing
		first, _ := newAgg(t, cfg)
		handle(t, first, part("x", 1, 2))
		if err := first.Handle(part("x", 2, 2)); err == nil {
			t.Fatal("Handle with a failing outbox returned nil")
		}
		if got := db.Published(t, region, "out"); len(got) != 0 {
			t.Fatalf("the failed send left %v", got)
		}
		cfg.Store = working
		second, _ := newAgg(t, cfg)
		runTimeouts(t, second)
		handle(t, second, part("x", 2, 2)) // the redelivery
		deadline := time.Now().Add(10 * time.Second)
		for {
			g, err := store.Get(context.Background(), "x")
			if err != nil {
				t.Fatal(err)
			}
			if g.Size == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("group %+v not released", g)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if got := db.Published(t, region, "out"); len(got) != 1 {
			t.Errorf("published %v, want exactly one output", got)
		}
	})
}

func TestReleaseLockBeforeSendWithExpireGroupsOnCompletionIsInvalid(t *testing.T) {
	_, err := aggregator.New(aggregator.Config{Publisher: discardPub{}, OutputTopic: "out",
		ReleaseLockBeforeSend: true, ExpireGroupsOnCompletion: true})
	if !errors.Is(err, aggregator.ErrInvalidConfig) {
		t.Errorf("New: %v, want ErrInvalidConfig", err)
	}
}

package resequencer_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/lockreg/lockreg/groupstore/sqlstore"
	"github.com/lockreg/lockreg/internal/testdb"
	"github.com/lockreg/lockreg/internal/testpub"
	"github.com/lockreg/lockreg/jdbc"
	"github.com/lockreg/lockreg/registry"
	"github.com/lockreg/lockreg/resequencer"
)

// Cluster of 4 resequencer handlers, each with its own lock repository
// (client id), registry and store handle on one PostgreSQL region, taking
// shuffled deliveries with redeliveries from a shared queue as competing
// consumers; a delivery that fails is requeued, as a broker redelivers a
// nacked message. One handler is killed mid-run: its in-flight handler
// calls are canceled wherever they are and its lock leases are released.
// Every group must come out complete and in order; a release republished
// after the kill carries the UUIDs of the first attempt.
func TestReseqClusterReleasesEveryGroupCompleteAndInOrderOnPostgres(t *testing.T) {
	pg := testdb.Postgres(t)
	const (
		handlers  = 4
		workers   = 4 // concurrent deliveries per handler
		sizeN     = 10
		redeliver = 0.2
	)
	groupsN := 300
	if testing.Short() {
		groupsN = 50
	}
	region := testdb.RandomRegion()
	out := testpub.NewRecorder()

	// The workload: every message once, a fifth again, shuffled.
	rng := rand.New(rand.NewPCG(7, 11))
	var deliveries []*message.Message
	for g := range groupsN {
		for seq := 1; seq <= sizeN; seq++ {
			m := message.NewMessage(fmt.Sprintf("g%d-%d", g, seq), []byte(strconv.Itoa(seq)))
			m.Metadata.Set("correlation_id", fmt.Sprintf("g%d", g))
			m.Metadata.Set("sequence_number", strconv.Itoa(seq))
			m.Metadata.Set("sequence_size", strconv.Itoa(sizeN))
			deliveries = append(deliveries, m)
			if rng.Float64() < redeliver {
				deliveries = append(deliveries, m.Copy())
			}
		}
	}
	rng.Shuffle(len(deliveries), func(i, j int) { deliveries[i], deliveries[j] = deliveries[j], deliveries[i] })
	queue := make(chan *message.Message, len(deliveries))
	for _, m := range deliveries {
		queue <- m
	}
	var pending sync.WaitGroup
	pending.Add(len(deliveries))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		wg       sync.WaitGroup
		handled  sync.Map // handler index -> *int64 count, for the kill point
		mu       sync.Mutex
		failures int
	)
	kills := make([]context.CancelFunc, handlers)
	regs := make([]*registry.Registry, handlers)
	for h := range handlers {
		repo, err := jdbc.NewLockRepository(ctx, pg.DB, jdbc.WithRegion(region))
		if err != nil {
			t.Fatal(err)
		}
		regs[h], err = registry.New(repo, registry.WithIdleBetweenTries(5*time.Millisecond),
			registry.WithErrorHandler(func(string, error) {}))
		if err != nil {
			t.Fatal(err)
		}
		defer regs[h].Close(context.Background())
		store, err := sqlstore.New(pg.DB, sqlstore.Config{Region: region})
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close(context.Background())
		rs, err := resequencer.New(resequencer.Config{Publisher: out, OutputTopic: "out", DiscardTopic: "discard",
			Store: store, Locks: regs[h], ReleasePartialSequences: true, Logger: watermill.NopLogger{}})
		if err != nil {
			t.Fatal(err)
		}
		hctx, kill := context.WithCancel(ctx)
		kills[h] = kill
		var count int64
		handled.Store(h, &count)
		for range workers {
			wg.Go(func() {
				for {
					var m *message.Message
					select {
					case <-hctx.Done():
						return
					case m = <-queue:
					}
					mctx, done := context.WithCancel(hctx)
					m.SetContext(mctx)
					err := rs.Handle(m)
					done()
					if err != nil {
						mu.Lock()
						failures++
						mu.Unlock()
						queue <- m.Copy() // redelivered, possibly to another handler
						continue
					}
					mu.Lock()
					count++
					killNow := h == 0 && count == int64(len(deliveries)/(2*handlers))
					mu.Unlock()
					pending.Done()
					if killNow {
						kill() // handler 0 dies mid-run, in-flight calls and all
						regs[0].Close(context.Background())
					}
				}
			})
		}
	}

	allDone := make(chan struct{})
	go func() { pending.Wait(); close(allDone) }()
	select {
	case <-allDone:
	case <-time.After(90 * time.Second):
		cancel()
		wg.Wait()
		t.Fatalf("timed out with %d deliveries in the queue", len(queue))
	}
	cancel()
	wg.Wait()
	for h := range kills {
		kills[h]()
	}

	byGroup := map[string][]*message.Message{}
	for _, m := range out.On("out") {
		key := m.Metadata.Get("correlation_id")
		byGroup[key] = append(byGroup[key], m)
	}
	republished := 0
	for g := range groupsN {
		key := fmt.Sprintf("g%d", g)
		seen := map[string]int{} // output UUID -> sequence number
		var firsts []int
		for _, m := range byGroup[key] {
			seq, _ := strconv.Atoi(m.Metadata.Get("sequence_number"))
			if prev, ok := seen[m.UUID]; ok {
				if prev != seq {
					t.Fatalf("group %s: UUID %s for %d and %d", key, m.UUID, prev, seq)
				}
				republished++
				continue
			}
			seen[m.UUID] = seq
			if n := len(firsts); n > 0 && seq <= firsts[n-1] {
				t.Fatalf("group %s: %d published after %d (%v)", key, seq, firsts[n-1], firsts)
			}
			firsts = append(firsts, seq)
		}
		if len(firsts) != sizeN || firsts[0] != 1 || firsts[sizeN-1] != sizeN {
			t.Fatalf("group %s: released %v, want 1..%d", key, firsts, sizeN)
		}
	}
	if d := out.On("discard"); len(d) != 0 {
		t.Errorf("discarded %d redeliveries, want none", len(d))
	}
	var perHandler []int64
	for h := range handlers {
		c, _ := handled.Load(h)
		perHandler = append(perHandler, *c.(*int64))
	}
	t.Logf("%d deliveries of %d messages in %d groups; handled per handler %v (handler 0 killed); "+
		"%d failed attempts redelivered; %d outputs republished with their first UUID",
		len(deliveries), groupsN*sizeN, groupsN, perHandler, failures, republished)
}

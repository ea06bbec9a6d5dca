package resequencer_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"pgregory.net/rapid"

	"github.com/lockreg/lockreg/groupstore"
	"github.com/lockreg/lockreg/internal/testpub"
	"github.com/lockreg/lockreg/registry"
	"github.com/lockreg/lockreg/registry/registrytest"
	"github.com/lockreg/lockreg/resequencer"
)

// delivery is one delivery of a message to an instance.
type delivery struct {
	msg      *message.Message
	instance int
}

// For any arrival order, redelivery, duplication (another message with a
// number already sent) and split of the deliveries across 2 or 3
// instances sharing a store, every group's output is strictly increasing
// and, without timeouts, complete; every duplicate is discarded once.
func TestOutputPerGroupIsStrictlyIncreasingAndCompleteForAnyArrival(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		partial := rapid.Bool().Draw(rt, "partial")
		instances := rapid.IntRange(2, 3).Draw(rt, "instances")
		separateRegistries := rapid.Bool().Draw(rt, "separateRegistries")
		sizes := rapid.SliceOfN(rapid.IntRange(1, 6), 1, 4).Draw(rt, "sizes")

		var msgs []*message.Message
		copied := map[string]bool{} // key/seq of numbers sent by two messages
		for g, size := range sizes {
			key := fmt.Sprintf("g%d", g)
			for seq := 1; seq <= size; seq++ {
				m := part(key, seq, size)
				for range 1 + rapid.IntRange(0, 2).Draw(rt, "redeliveries") {
					msgs = append(msgs, m.Copy())
				}
				if rapid.IntRange(0, 4).Draw(rt, "copy") == 0 {
					msgs = append(msgs, partWithID(fmt.Sprintf("%s-%d-copy", key, seq), key, seq, size))
					copied[fmt.Sprintf("%s/%d", key, seq)] = true
				}
			}
		}
		msgs = rapid.Permutation(msgs).Draw(rt, "order")
		perInstance := make([][]*message.Message, instances)
		for _, m := range msgs {
			i := rapid.IntRange(0, instances-1).Draw(rt, "instance")
			perInstance[i] = append(perInstance[i], m)
		}

		store := groupstore.NewMemory()
		rec := testpub.NewRecorder()
		leases := registrytest.NewMemory()
		shared, err := registry.NewLocal()
		if err != nil {
			t.Fatal(err)
		}
		regs := []*registry.Registry{shared}
		qs := make([]*resequencer.Resequencer, instances)
		for i := range qs {
			locks := shared
			if separateRegistries {
				locks, err = registry.New(leases.NewClient(), registry.WithIdleBetweenTries(time.Millisecond))
				if err != nil {
					t.Fatal(err)
				}
				regs = append(regs, locks)
			}
			q, err := resequencer.New(resequencer.Config{Publisher: rec, OutputTopic: "out", DiscardTopic: "discard",
				Store: store, Locks: locks, ReleasePartialSequences: partial, Logger: watermill.NopLogger{}})
			if err != nil {
				rt.Fatal(err)
			}
			qs[i] = q
		}
		defer func() {
			for _, r := range regs {
				r.Close(context.Background())
			}
		}()

		var wg sync.WaitGroup
		errs := make(chan error, len(msgs))
		for i, q := range qs {
			wg.Go(func() {
				for _, m := range perInstance[i] {
					if err := q.Handle(m); err != nil {
						errs <- fmt.Errorf("instance %d: Handle(%s): %w", i, m.UUID, err)
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			rt.Fatal(err)
		}

		byGroup := map[string][]int{}
		uuids := map[string]bool{}
		for _, m := range rec.On("out") {
			key := m.Metadata.Get("correlation_id")
			byGroup[key] = append(byGroup[key], seqs([]*message.Message{m})[0])
			if uuids[m.UUID] {
				rt.Fatalf("output UUID %s published twice", m.UUID)
			}
			uuids[m.UUID] = true
		}
		for g, size := range sizes {
			key := fmt.Sprintf("g%d", g)
			want := make([]int, size)
			for i := range want {
				want[i] = i + 1
			}
			if got := byGroup[key]; !slices.Equal(got, want) {
				rt.Fatalf("group %s released %v, want %v", key, got, want)
			}
		}
		// Of two messages with one number, one is released and the other
		// discarded (once per delivery if it reached a complete group).
		discardedNumbers := map[string]bool{}
		for _, m := range rec.On("discard") {
			n := fmt.Sprintf("%s/%s", m.Metadata.Get("correlation_id"), m.Metadata.Get("sequence_number"))
			if r := m.Metadata.Get(resequencer.DiscardReasonKey); !copied[n] || r != "late" && r != "duplicate" {
				rt.Fatalf("discarded %s as %q", m.UUID, r)
			}
			discardedNumbers[n] = true
		}
		if len(discardedNumbers) != len(copied) {
			rt.Fatalf("discarded one of the messages of %v, want of each of %v", discardedNumbers, copied)
		}
	})
}

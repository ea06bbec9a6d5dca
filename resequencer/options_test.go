package resequencer_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/lockreg/lockreg/groupstore"
	"github.com/lockreg/lockreg/groupstore/sqlstore"
	"github.com/lockreg/lockreg/internal/testdb"
	"github.com/lockreg/lockreg/resequencer"
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

func getGroup(t *testing.T, store groupstore.Store, key string) groupstore.Group {
	t.Helper()
	g, err := store.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// Spring's ResequencerTests and section 5 of the reference notes, one
// behaviour each; the tests of resequencer_test.go cover the rest.

func TestPartialReleaseKeepsTheTimeoutOfMessagesHeldBehindAGap(t *testing.T) {
	// Spring cancels the group's timer when a message arrives and sets no
	// new one when that message releases a run, so 3 would wait for a
	// reaper; here the group keeps the due time its last message set.
	forEachStore(t, func(t *testing.T, store groupstore.Store) {
		q, rec := newReseq(t, resequencer.Config{Store: store, ReleasePartialSequences: true, SendPartialResultOnExpiry: true,
			GroupTimeout: 50 * time.Millisecond, PollInterval: 5 * time.Millisecond})
		handle(t, q, part("g", 3, 5), part("g", 1, 5))
		wantSeqs(t, rec.On("out"), 1)
		runTimeouts(t, q)
		wantSeqs(t, rec.WaitFor(t, "out", 2), 1, 3)
	})
}

func TestTimeoutOfAPartiallyReleasedGroupDiscardsOnlyTheHeldMessages(t *testing.T) {
	forEachStore(t, func(t *testing.T, store groupstore.Store) {
		q, rec := newReseq(t, resequencer.Config{Store: store, ReleasePartialSequences: true,
			GroupTimeout: 50 * time.Millisecond, PollInterval: 5 * time.Millisecond})
		handle(t, q, part("g", 1, 4), part("g", 2, 4), part("g", 4, 4))
		runTimeouts(t, q)
		d := rec.WaitFor(t, "discard", 1)
		if got := payloads(d); !slices.Equal(got, []string{"g-4"}) || reasons(d)[0] != "expired" {
			t.Errorf("discarded %v (%v), want g-4 expired", got, reasons(d))
		}
		wantSeqs(t, rec.On("out"), 1, 2)
	})
}

func TestExpireGroupsOnTimeoutHoldsALateMessageUntilTheNextTimeout(t *testing.T) {
	// Spring's testTimeoutDontExpire: with the group removed on timeout, a
	// message after the timeout starts a new group, which is discarded
	// when that group times out, not at once.
	forEachStore(t, func(t *testing.T, store groupstore.Store) {
		q, rec := newReseq(t, resequencer.Config{Store: store, ExpireGroupsOnTimeout: true,
			GroupTimeout: 50 * time.Millisecond, PollInterval: 5 * time.Millisecond})
		runTimeouts(t, q)
		handle(t, q, part("g", 2, 3))
		rec.WaitFor(t, "discard", 1)
		for deadline := time.Now().Add(10 * time.Second); ; {
			if time.Now().After(deadline) {
				t.Fatal("the expired group was not removed")
			}
			_, err := store.Get(context.Background(), "g")
			if errors.Is(err, groupstore.ErrNotFound) {
				break // removed after the discard
			}
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(5 * time.Millisecond)
		}
		handle(t, q, part("g", 1, 3))
		if n := len(rec.On("discard")); n != 1 {
			t.Fatalf("%d discards right after the late message, want it held", n)
		}
		if g := getGroup(t, store, "g"); g.Size != 1 || g.Complete {
			t.Errorf("new group: size %d, complete %v", g.Size, g.Complete)
		}
		d := rec.WaitFor(t, "discard", 2)
		if got := payloads(d); !slices.Equal(got, []string{"g-2", "g-1"}) || reasons(d)[1] != "expired" {
			t.Errorf("discarded %v (%v)", got, reasons(d))
		}
	})
}

func TestGroupTimeoutFuncSeesTheGroupAfterAPartialRelease(t *testing.T) {
	type seen struct {
		size int
		last int64
	}
	var calls []seen
	q, rec := newReseq(t, resequencer.Config{ReleasePartialSequences: true,
		GroupTimeoutFunc: func(g groupstore.Group, latest *message.Message) time.Duration {
			calls = append(calls, seen{g.Size, g.LastReleasedSequence})
			return time.Hour
		}})
	handle(t, q, part("g", 3, 3), part("g", 1, 3), part("g", 2, 3))
	wantSeqs(t, rec.On("out"), 1, 2, 3)
	// After 3: 3 held, nothing released; after 1: 1 released, 3 held; 2
	// completes the group, so no call.
	if want := []seen{{1, 0}, {1, 1}}; !slices.Equal(calls, want) {
		t.Errorf("calls %v, want %v", calls, want)
	}
}

func TestGroupTimeoutFuncZeroClearsTheDueTimeAfterAPartialRelease(t *testing.T) {
	forEachStore(t, func(t *testing.T, store groupstore.Store) {
		q, rec := newReseq(t, resequencer.Config{Store: store, ReleasePartialSequences: true,
			GroupTimeoutFunc: func(g groupstore.Group, _ *message.Message) time.Duration {
				if g.LastReleasedSequence == 0 {
					return time.Hour
				}
				return 0
			}})
		handle(t, q, part("g", 3, 3))
		if getGroup(t, store, "g").Due.IsZero() {
			t.Fatal("no due time after a positive result")
		}
		handle(t, q, part("g", 1, 3))
		wantSeqs(t, rec.On("out"), 1)
		if d := getGroup(t, store, "g").Due; !d.IsZero() {
			t.Errorf("due %v after a zero result, want none", d)
		}
	})
}

func TestGroupTimeoutFuncNegativeResultExpiresTheGroupInHandle(t *testing.T) {
	forEachStore(t, func(t *testing.T, store groupstore.Store) {
		q, rec := newReseq(t, resequencer.Config{Store: store, SendPartialResultOnExpiry: true,
			GroupTimeoutFunc: func(_ groupstore.Group, latest *message.Message) time.Duration {
				if latest.Metadata.Get("flush") == "yes" {
					return -1
				}
				return time.Hour
			}})
		flush := part("g", 4, 5)
		flush.Metadata.Set("flush", "yes")
		handle(t, q, part("g", 2, 5), part("g", 1, 5))
		wantSeqs(t, rec.On("out"))
		handle(t, q, flush) // no runner runs: Handle expired the group
		wantSeqs(t, rec.On("out"), 1, 2, 4)
		if g := getGroup(t, store, "g"); !g.Complete {
			t.Error("expired group not complete")
		}
	})
}

func TestGroupTimeoutAndGroupTimeoutFuncAreMutuallyExclusive(t *testing.T) {
	_, err := resequencer.New(resequencer.Config{Publisher: printer{}, OutputTopic: "out", GroupTimeout: time.Second,
		GroupTimeoutFunc: func(groupstore.Group, *message.Message) time.Duration { return time.Second }})
	if !errors.Is(err, resequencer.ErrInvalidConfig) {
		t.Errorf("New: %v, want ErrInvalidConfig", err)
	}
}

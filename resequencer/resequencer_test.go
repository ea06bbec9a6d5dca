package resequencer_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"go.uber.org/goleak"

	"github.com/lockreg/lockreg/groupstore"
	"github.com/lockreg/lockreg/internal/testpub"
	"github.com/lockreg/lockreg/registry"
	"github.com/lockreg/lockreg/resequencer"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// part returns message seq of a group of size n (n 0: no size) with UUID
// key-seq.
func part(key string, seq, n int) *message.Message {
	return partWithID(fmt.Sprintf("%s-%d", key, seq), key, seq, n)
}

func partWithID(id, key string, seq, n int) *message.Message {
	m := message.NewMessage(id, []byte(id))
	m.Metadata.Set("correlation_id", key)
	m.Metadata.Set("sequence_number", strconv.Itoa(seq))
	if n > 0 {
		m.Metadata.Set("sequence_size", strconv.Itoa(n))
	}
	return m
}

func newReseq(t *testing.T, cfg resequencer.Config) (*resequencer.Resequencer, *testpub.Recorder) {
	t.Helper()
	rec := testpub.NewRecorder()
	if cfg.Publisher == nil {
		cfg.Publisher = rec
	}
	if cfg.OutputTopic == "" {
		cfg.OutputTopic = "out"
	}
	if cfg.DiscardTopic == "" {
		cfg.DiscardTopic = "discard"
	}
	if cfg.Logger == nil {
		cfg.Logger = watermill.NopLogger{}
	}
	q, err := resequencer.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return q, rec
}

func handle(t *testing.T, q *resequencer.Resequencer, msgs ...*message.Message) {
	t.Helper()
	for _, m := range msgs {
		if err := q.Handle(m); err != nil {
			t.Fatalf("Handle(%s): %v", m.UUID, err)
		}
	}
}

// seqs returns the sequence numbers of msgs.
func seqs(msgs []*message.Message) []int {
	out := make([]int, len(msgs))
	for i, m := range msgs {
		out[i], _ = strconv.Atoi(m.Metadata.Get("sequence_number"))
	}
	return out
}

func payloads(msgs []*message.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = string(m.Payload)
	}
	return out
}

func reasons(msgs []*message.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.Metadata.Get(resequencer.DiscardReasonKey)
	}
	return out
}

func wantSeqs(t *testing.T, msgs []*message.Message, want ...int) {
	t.Helper()
	if got := seqs(msgs); !slices.Equal(got, want) {
		t.Fatalf("released %v, want %v", got, want)
	}
}

// runTimeouts runs q's timeout runner until t ends.
func runTimeouts(t *testing.T, q *resequencer.Resequencer) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); q.RunTimeouts(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

func TestWholeSequenceIsReleasedInOrderOnlyWhenComplete(t *testing.T) {
	q, rec := newReseq(t, resequencer.Config{})
	handle(t, q, part("g", 3, 3), part("g", 1, 3))
	wantSeqs(t, rec.On("out"))
	handle(t, q, part("g", 2, 3))
	wantSeqs(t, rec.On("out"), 1, 2, 3)
	if got := payloads(rec.On("out")); !slices.Equal(got, []string{"g-1", "g-2", "g-3"}) {
		t.Errorf("payloads %v", got)
	}
}

func TestPartialSequencesAreReleasedAsEachRunCompletes(t *testing.T) {
	q, rec := newReseq(t, resequencer.Config{ReleasePartialSequences: true})
	handle(t, q, part("g", 2, 5))
	wantSeqs(t, rec.On("out"))
	handle(t, q, part("g", 1, 5))
	wantSeqs(t, rec.On("out"), 1, 2)
	handle(t, q, part("g", 5, 5), part("g", 4, 5))
	wantSeqs(t, rec.On("out"), 1, 2)
	handle(t, q, part("g", 3, 5))
	wantSeqs(t, rec.On("out"), 1, 2, 3, 4, 5)
}

func TestLastReleasedSequenceIsKeptInTheStore(t *testing.T) {
	store := groupstore.NewMemory()
	q, _ := newReseq(t, resequencer.Config{Store: store, ReleasePartialSequences: true})
	handle(t, q, part("g", 1, 5), part("g", 2, 5), part("g", 4, 5))
	g, err := store.Get(context.Background(), "g")
	if err != nil {
		t.Fatal(err)
	}
	if g.LastReleasedSequence != 2 || g.Size != 1 || g.Complete {
		t.Errorf("group: last released %d, size %d, complete %v; want 2, 1, false", g.LastReleasedSequence, g.Size, g.Complete)
	}
}

func TestGroupIsCompleteOnceTheWholeSequenceIsReleased(t *testing.T) {
	store := groupstore.NewMemory()
	q, _ := newReseq(t, resequencer.Config{Store: store, ReleasePartialSequences: true})
	handle(t, q, part("g", 2, 2), part("g", 1, 2))
	g, err := store.Get(context.Background(), "g")
	if err != nil {
		t.Fatal(err)
	}
	if !g.Complete || g.LastReleasedSequence != 2 || !g.Due.IsZero() {
		t.Errorf("group: complete %v, last released %d, due %v; want true, 2, none", g.Complete, g.LastReleasedSequence, g.Due)
	}
}

// Spring accepts such a message into the group and then stops releasing
// partial runs until the group times out.
func TestLateMessageIsDiscardedAndDoesNotStallLaterReleases(t *testing.T) {
	q, rec := newReseq(t, resequencer.Config{ReleasePartialSequences: true})
	handle(t, q, part("g", 1, 4), part("g", 2, 4))
	handle(t, q, partWithID("late-copy", "g", 2, 4))
	if got := rec.On("discard"); len(got) != 1 || got[0].UUID != "late-copy" || reasons(got)[0] != "late" {
		t.Fatalf("discarded %v with reasons %v, want late-copy as late", payloads(got), reasons(got))
	}
	handle(t, q, part("g", 3, 4))
	wantSeqs(t, rec.On("out"), 1, 2, 3)
}

func TestDuplicateSequenceNumberIsDiscardedAtOnce(t *testing.T) {
	q, rec := newReseq(t, resequencer.Config{ReleasePartialSequences: true})
	handle(t, q, part("g", 2, 2), partWithID("second-2", "g", 2, 2))
	if got := rec.On("discard"); len(got) != 1 || got[0].UUID != "second-2" || reasons(got)[0] != "duplicate" {
		t.Fatalf("discarded %v with reasons %v, want second-2 as duplicate", payloads(got), reasons(got))
	}
	handle(t, q, part("g", 1, 2))
	if got := payloads(rec.On("out")); !slices.Equal(got, []string{"g-1", "g-2"}) {
		t.Errorf("released %v, want the first arrivals g-1, g-2", got)
	}
}

func TestRedeliveryIsAckedWithoutOutputOrDiscard(t *testing.T) {
	q, rec := newReseq(t, resequencer.Config{ReleasePartialSequences: true})
	handle(t, q, part("g", 1, 3), part("g", 3, 3), part("g", 1, 3), part("g", 3, 3))
	wantSeqs(t, rec.On("out"), 1)
	if got := rec.On("discard"); len(got) != 0 {
		t.Errorf("discarded %v", payloads(got))
	}
}

func TestMessageForCompleteGroupIsDiscardedAsLate(t *testing.T) {
	q, rec := newReseq(t, resequencer.Config{})
	handle(t, q, part("g", 1, 1), partWithID("again", "g", 1, 1))
	if got := rec.On("discard"); len(got) != 1 || reasons(got)[0] != "late" {
		t.Fatalf("discarded %v with reasons %v, want one late", payloads(got), reasons(got))
	}
}

func TestInvalidSequenceMetadataIsDiscardedWithReason(t *testing.T) {
	for _, tc := range []struct {
		name        string
		number      string // "" for none
		size        string // "" for none
		wantInReson string
	}{
		{"missing number", "", "3", "sequence_number is missing"},
		{"non-numeric number", "two", "3", `sequence_number "two" is not a number`},
		{"negative number", "-1", "3", "sequence_number -1 is below 1"},
		{"zero number", "0", "3", "sequence_number 0 is below 1"},
		{"number beyond size", "4", "3", "sequence_number 4 is beyond sequence_size 3"},
		{"missing size", "1", "", "sequence_size is missing"},
		{"non-numeric size", "1", "x", `sequence_size "x" is not a number`},
		{"zero size", "1", "0", "sequence_size 0 is below 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q, rec := newReseq(t, resequencer.Config{})
			m := message.NewMessage("bad", []byte("payload"))
			m.Metadata.Set("correlation_id", "g")
			if tc.number != "" {
				m.Metadata.Set("sequence_number", tc.number)
			}
			if tc.size != "" {
				m.Metadata.Set("sequence_size", tc.size)
			}
			handle(t, q, m)
			got := rec.On("discard")
			if len(got) != 1 || string(got[0].Payload) != "payload" {
				t.Fatalf("discarded %v, want the message", payloads(got))
			}
			if r := reasons(got)[0]; r != "invalid: "+tc.wantInReson {
				t.Errorf("reason %q, want %q", r, "invalid: "+tc.wantInReson)
			}
		})
	}
}

func TestSizeDifferentFromTheGroupsIsDiscardedAsInvalid(t *testing.T) {
	q, rec := newReseq(t, resequencer.Config{})
	handle(t, q, part("g", 2, 3), partWithID("other-size", "g", 1, 4))
	got := rec.On("discard")
	if len(got) != 1 || got[0].UUID != "other-size" || !strings.HasPrefix(reasons(got)[0], "invalid: sequence_size 4 differs") {
		t.Fatalf("discarded %v with reasons %v", payloads(got), reasons(got))
	}
}

func TestSequenceMetadataKeysAreConfigurable(t *testing.T) {
	q, rec := newReseq(t, resequencer.Config{SequenceNumberKey: "n", SequenceSizeKey: "of"})
	for _, n := range []string{"2", "1"} {
		m := message.NewMessage("m"+n, []byte(n))
		m.Metadata.Set("correlation_id", "g")
		m.Metadata.Set("n", n)
		m.Metadata.Set("of", "2")
		handle(t, q, m)
	}
	if got := payloads(rec.On("out")); !slices.Equal(got, []string{"1", "2"}) {
		t.Errorf("released %v, want [1 2]", got)
	}
}

func TestCorrelationIsConfigurable(t *testing.T) {
	q, rec := newReseq(t, resequencer.Config{Correlation: func(m *message.Message) string { return m.Metadata.Get("account") }})
	for _, n := range []int{2, 1} {
		m := part("ignored", n, 2)
		m.Metadata.Set("account", "acc-1")
		handle(t, q, m)
	}
	wantSeqs(t, rec.On("out"), 1, 2)
}

func TestUnboundedSequenceWithoutSizeIsReleasedPartially(t *testing.T) {
	q, rec := newReseq(t, resequencer.Config{ReleasePartialSequences: true})
	handle(t, q, part("g", 2, 0), part("g", 1, 0), part("g", 3, 0))
	wantSeqs(t, rec.On("out"), 1, 2, 3)
}

func TestMessagesOfDifferentGroupsAreResequencedSeparately(t *testing.T) {
	q, rec := newReseq(t, resequencer.Config{ReleasePartialSequences: true})
	handle(t, q, part("a", 2, 2), part("b", 1, 2), part("a", 1, 2), part("b", 2, 2))
	if got := payloads(rec.On("out")); !slices.Equal(got, []string{"b-1", "a-1", "a-2", "b-2"}) {
		t.Errorf("released %v", got)
	}
}

func TestMessageWithoutCorrelationKeyIsAnError(t *testing.T) {
	q, _ := newReseq(t, resequencer.Config{})
	m := message.NewMessage("m", nil)
	m.Metadata.Set("sequence_number", "1")
	m.Metadata.Set("sequence_size", "1")
	if err := q.Handle(m); !errors.Is(err, resequencer.ErrNoCorrelationKey) {
		t.Errorf("Handle: %v, want ErrNoCorrelationKey", err)
	}
}

func TestOutputUUIDsAreTheSameWhenAFailedPublishIsRetried(t *testing.T) {
	q, rec := newReseq(t, resequencer.Config{ReleasePartialSequences: true})
	rec.FailNext(1)
	if err := q.Handle(part("g", 1, 2)); !errors.Is(err, testpub.ErrPublish) {
		t.Fatalf("Handle: %v, want the publish error", err)
	}
	handle(t, q, part("g", 1, 2), part("g", 2, 2)) // the redelivery, then 2
	out := rec.On("out")
	wantSeqs(t, out, 1, 2)
	if out[0].UUID != rec.Failed()[0] {
		t.Errorf("retried output UUID %s, failed attempt's %s", out[0].UUID, rec.Failed()[0])
	}
	if out[0].UUID == out[1].UUID || out[0].UUID == "g-1" {
		t.Errorf("output UUIDs %s, %s: want distinct, derived ones", out[0].UUID, out[1].UUID)
	}
}

func TestFailedPublishLeavesTheGroupUnchanged(t *testing.T) {
	store := groupstore.NewMemory()
	q, rec := newReseq(t, resequencer.Config{Store: store, ReleasePartialSequences: true})
	rec.FailNext(1)
	if err := q.Handle(part("g", 1, 2)); err == nil {
		t.Fatal("Handle succeeded although the publish failed")
	}
	g, err := store.Get(context.Background(), "g")
	if err != nil {
		t.Fatal(err)
	}
	if g.LastReleasedSequence != 0 || g.Size != 1 {
		t.Errorf("group: last released %d, size %d; want 0, 1", g.LastReleasedSequence, g.Size)
	}
}

func TestPublishRetriedByAnotherInstanceCarriesTheSameUUIDs(t *testing.T) {
	store, locks := groupstore.NewMemory(), newLocal(t)
	a, recA := newReseq(t, resequencer.Config{Store: store, Locks: locks, ReleasePartialSequences: true})
	b, recB := newReseq(t, resequencer.Config{Store: store, Locks: locks, ReleasePartialSequences: true})
	handle(t, a, part("g", 2, 2))
	recA.FailNext(1)
	if err := a.Handle(part("g", 1, 2)); err == nil {
		t.Fatal("Handle succeeded although the publish failed")
	}
	handle(t, b, part("g", 1, 2)) // redelivered to the other instance
	out := recB.On("out")
	wantSeqs(t, out, 1, 2)
	if !slices.Equal([]string{out[0].UUID, out[1].UUID}, recA.Failed()) {
		t.Errorf("UUIDs %s, %s; the failed attempt's %v", out[0].UUID, out[1].UUID, recA.Failed())
	}
}

func TestLaterRunIsNotPublishedBeforeAnEarlierOneFromAnotherInstance(t *testing.T) {
	store, locks := groupstore.NewMemory(), newLocal(t)
	shared := testpub.NewRecorder()
	release := shared.Hold()
	a, _ := newReseq(t, resequencer.Config{Publisher: shared, Store: store, Locks: locks, ReleasePartialSequences: true})
	b, _ := newReseq(t, resequencer.Config{Publisher: shared, Store: store, Locks: locks, ReleasePartialSequences: true})
	errs := make(chan error, 2)
	go func() { errs <- a.Handle(part("g", 1, 2)) }() // publishes run 1, blocked
	go func() { errs <- b.Handle(part("g", 2, 2)) }() // run 2, on another instance
	release()
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	wantSeqs(t, shared.On("out"), 1, 2)
}

func TestLockTimeoutNacksTheMessage(t *testing.T) {
	locks, err := registry.NewLocal()
	if err != nil {
		t.Fatal(err)
	}
	q, _ := newReseq(t, resequencer.Config{Locks: locks, LockTimeout: 10 * time.Millisecond})
	l := locks.Obtain(resequencer.DefaultLockPrefix + "g")
	l.Lock()
	defer l.Unlock()
	if err := q.Handle(part("g", 1, 1)); !errors.Is(err, resequencer.ErrLockTimeout) {
		t.Errorf("Handle: %v, want ErrLockTimeout", err)
	}
}

func TestLostLockStopsTheReleaseBeforeItIsRecorded(t *testing.T) {
	store := groupstore.NewMemory()
	locks, err := registry.NewLocal(registry.WithTTL(50 * time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	q, _ := newReseq(t, resequencer.Config{Publisher: testpub.UntilDone{}, Store: store, Locks: locks})
	if err := q.Handle(part("g", 1, 1)); !errors.Is(err, resequencer.ErrLockLost) {
		t.Fatalf("Handle: %v, want ErrLockLost", err)
	}
	g, err := store.Get(context.Background(), "g")
	if err != nil {
		t.Fatal(err)
	}
	if g.Complete || g.Size != 1 {
		t.Errorf("group: complete %v, size %d; want the release unrecorded", g.Complete, g.Size)
	}
}

func TestTimeoutReleasesWhatIsThereInOrderSkippingGaps(t *testing.T) {
	q, rec := newReseq(t, resequencer.Config{GroupTimeout: 20 * time.Millisecond, PollInterval: 5 * time.Millisecond,
		SendPartialResultOnExpiry: true})
	handle(t, q, part("g", 5, 5), part("g", 2, 5), part("g", 4, 5))
	runTimeouts(t, q)
	wantSeqs(t, rec.WaitFor(t, "out", 3), 2, 4, 5)
}

func TestTimeoutDiscardsTheMessagesByDefault(t *testing.T) {
	q, rec := newReseq(t, resequencer.Config{GroupTimeout: 20 * time.Millisecond, PollInterval: 5 * time.Millisecond})
	handle(t, q, part("g", 3, 3), part("g", 2, 3))
	runTimeouts(t, q)
	got := rec.WaitFor(t, "discard", 2)
	if r := reasons(got); !slices.Equal(r, []string{"expired", "expired"}) {
		t.Errorf("reasons %v, want expired", r)
	}
	if len(rec.On("out")) != 0 {
		t.Errorf("released %v", payloads(rec.On("out")))
	}
}

func TestTimedOutGroupIsKeptCompleteSoLateMessagesAreDiscarded(t *testing.T) {
	store := groupstore.NewMemory()
	q, rec := newReseq(t, resequencer.Config{Store: store, GroupTimeout: 20 * time.Millisecond,
		PollInterval: 5 * time.Millisecond, SendPartialResultOnExpiry: true})
	handle(t, q, part("g", 2, 3))
	runTimeouts(t, q)
	rec.WaitFor(t, "out", 1)
	handle(t, q, part("g", 1, 3))
	if got := rec.On("discard"); len(got) != 1 || reasons(got)[0] != "late" {
		t.Fatalf("discarded %v with reasons %v, want g-1 as late", payloads(got), reasons(got))
	}
	wantSeqs(t, rec.On("out"), 2)
}

func TestExpireGroupsOnTimeoutStartsANewGroup(t *testing.T) {
	store := groupstore.NewMemory()
	q, rec := newReseq(t, resequencer.Config{Store: store, GroupTimeout: 20 * time.Millisecond,
		PollInterval: 5 * time.Millisecond, SendPartialResultOnExpiry: true, ExpireGroupsOnTimeout: true})
	handle(t, q, part("g", 2, 2))
	runTimeouts(t, q)
	first := rec.WaitFor(t, "out", 1)
	// The group is gone: a late 1 starts a new group and completes with a
	// new 2.
	handle(t, q, part("g", 1, 2), partWithID("new-2", "g", 2, 2))
	out := rec.WaitFor(t, "out", 3)
	wantSeqs(t, out, 2, 1, 2)
	if out[2].UUID == first[0].UUID {
		t.Error("the new group's 2 has the old group's output UUID")
	}
}

func TestExpireGroupsOnCompletionRemovesTheGroup(t *testing.T) {
	store := groupstore.NewMemory()
	q, _ := newReseq(t, resequencer.Config{Store: store, ExpireGroupsOnCompletion: true})
	handle(t, q, part("g", 1, 1))
	if _, err := store.Get(context.Background(), "g"); !errors.Is(err, groupstore.ErrNotFound) {
		t.Errorf("Get: %v, want ErrNotFound", err)
	}
}

func TestMinimumTimeoutForEmptyGroupsRemovesTheCompleteGroup(t *testing.T) {
	store := groupstore.NewMemory()
	q, _ := newReseq(t, resequencer.Config{Store: store, MinimumTimeoutForEmptyGroups: 10 * time.Millisecond,
		PollInterval: 5 * time.Millisecond})
	handle(t, q, part("g", 1, 1))
	runTimeouts(t, q)
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := store.Get(context.Background(), "g")
		if errors.Is(err, groupstore.ErrNotFound) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("group still there: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestDiscardsAreLoggedWithoutADiscardTopic(t *testing.T) {
	logger := watermill.NewCaptureLogger()
	rec := testpub.NewRecorder()
	q, err := resequencer.New(resequencer.Config{Publisher: rec, OutputTopic: "out", Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	m := part("g", 1, 1)
	delete(m.Metadata, "sequence_number")
	handle(t, q, m)
	if !logger.Has(watermill.CapturedMessage{Level: watermill.InfoLogLevel, Msg: "Message discarded",
		Fields: watermill.LogFields{"message_uuid": "g-1", "group": "g", "reason": "invalid: sequence_number is missing", "payload": "g-1"}}) {
		t.Errorf("no discard logged: %v", logger.Captured())
	}
}

func TestInvalidConfigIsRejected(t *testing.T) {
	for name, cfg := range map[string]resequencer.Config{
		"no publisher":        {OutputTopic: "out"},
		"no output topic":     {Publisher: testpub.NewRecorder()},
		"same metadata keys":  {Publisher: testpub.NewRecorder(), OutputTopic: "out", SequenceNumberKey: "k", SequenceSizeKey: "k"},
		"negative timeout":    {Publisher: testpub.NewRecorder(), OutputTopic: "out", GroupTimeout: -1},
		"publisher, no topic": {Publisher: testpub.NewRecorder(), OutputTopic: "out", DiscardPublisher: testpub.NewRecorder()},
	} {
		if _, err := resequencer.New(cfg); !errors.Is(err, resequencer.ErrInvalidConfig) {
			t.Errorf("%s: New: %v, want ErrInvalidConfig", name, err)
		}
	}
}

func TestRouterWithGoChannelReleasesInOrder(t *testing.T) {
	logger := watermill.NopLogger{}
	in := gochannel.NewGoChannel(gochannel.Config{}, logger)
	defer in.Close()
	out := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, logger)
	defer out.Close()
	q, err := resequencer.New(resequencer.Config{Publisher: out, OutputTopic: "ordered", ReleasePartialSequences: true,
		PollInterval: 5 * time.Millisecond, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	router, err := message.NewRouter(message.RouterConfig{}, logger)
	if err != nil {
		t.Fatal(err)
	}
	q.AddHandler(router, "resequence", "in", in)
	ordered, err := out.Subscribe(context.Background(), "ordered")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- router.Run(context.Background()) }()
	defer func() { router.Close(); <-done }()
	<-router.Running()
	const n = 20
	for _, i := range []int{7, 3, 20, 1, 2, 19, 4, 5, 6, 8, 9, 10, 12, 11, 13, 14, 16, 15, 17, 18} {
		if err := in.Publish("in", part("g", i, n)); err != nil {
			t.Fatal(err)
		}
	}
	var got []*message.Message
	timeout := time.After(10 * time.Second)
	for len(got) < n {
		select {
		case m := <-ordered:
			got = append(got, m)
			m.Ack()
		case <-timeout:
			t.Fatalf("got %v", seqs(got))
		}
	}
	want := make([]int, n)
	for i := range want {
		want[i] = i + 1
	}
	wantSeqs(t, got, want...)
}

// newLocal returns an in-process registry closed when t ends.
func newLocal(t testing.TB) *registry.Registry {
	t.Helper()
	r, err := registry.NewLocal()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(context.Background()) })
	return r
}

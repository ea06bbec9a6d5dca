package aggregator_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"go.uber.org/goleak"

	"github.com/lockreg/lockreg/aggregator"
	"github.com/lockreg/lockreg/groupstore"
	"github.com/lockreg/lockreg/internal/testpub"
	"github.com/lockreg/lockreg/registry"
)

func TestMain(m *testing.M) {
	// The Deduplicator's default repository (dedup_test.go) starts a clean-up
	// goroutine that nothing can stop.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction(
		"github.com/ThreeDotsLabs/watermill/message/router/middleware.(*mapExpiringKeyRepository).cleanOutLoop"))
}

// part returns message i of n of group key.
func part(key string, i, n int) *message.Message {
	m := message.NewMessage(fmt.Sprintf("%s-%d", key, i), []byte(fmt.Sprintf(`{"item":%d}`, i)))
	m.Metadata.Set("correlation_id", key)
	m.Metadata.Set("sequence_number", strconv.Itoa(i))
	m.Metadata.Set("sequence_size", strconv.Itoa(n))
	m.Metadata.Set("customer", "c-"+key)
	return m
}

func newAgg(t *testing.T, cfg aggregator.Config) (*aggregator.Aggregator, *testpub.Recorder) {
	t.Helper()
	rec := testpub.NewRecorder()
	if cfg.Publisher == nil {
		cfg.Publisher = rec
	}
	if cfg.OutputTopic == "" {
		cfg.OutputTopic = "out"
	}
	if cfg.Logger == nil {
		cfg.Logger = watermill.NopLogger{}
	}
	a, err := aggregator.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a, rec
}

func handle(t *testing.T, a *aggregator.Aggregator, msgs ...*message.Message) {
	t.Helper()
	for _, m := range msgs {
		if err := a.Handle(m); err != nil {
			t.Fatalf("Handle(%s): %v", m.UUID, err)
		}
	}
}

// runTimeouts runs a's timeout runner until t ends.
func runTimeouts(t *testing.T, a *aggregator.Aggregator) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); a.RunTimeouts(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

func TestGroupIsReleasedWhenItHoldsSequenceSizeMessages(t *testing.T) {
	a, rec := newAgg(t, aggregator.Config{})
	handle(t, a, part("o1", 3, 3), part("o1", 1, 3))
	if got := rec.On("out"); len(got) != 0 {
		t.Fatalf("released after 2 of 3: %v", got)
	}
	handle(t, a, part("o1", 2, 3))
	out := rec.On("out")
	if len(out) != 1 {
		t.Fatalf("got %d outputs, want 1", len(out))
	}
	if got, want := string(out[0].Payload), `[{"item":1},{"item":2},{"item":3}]`; got != want {
		t.Errorf("payload %s, want %s (sequence order)", got, want)
	}
	if out[0].Metadata.Get("correlation_id") != "o1" || out[0].Metadata.Get("customer") != "c-o1" {
		t.Errorf("metadata %v lacks the shared values", out[0].Metadata)
	}
	if out[0].Metadata.Get("sequence_size") != "" || out[0].Metadata.Get("sequence_number") != "" {
		t.Errorf("metadata %v keeps sequence keys", out[0].Metadata)
	}
}

func TestReleaseOnCountReleasesEveryNMessagesOfAGroup(t *testing.T) {
	a, rec := newAgg(t, aggregator.Config{Release: aggregator.ReleaseOnCount(2), ExpireGroupsOnCompletion: true})
	for i := 1; i <= 4; i++ {
		handle(t, a, part("k", i, 0))
	}
	out := rec.On("out")
	if len(out) != 2 || string(out[0].Payload) != `[{"item":1},{"item":2}]` || string(out[1].Payload) != `[{"item":3},{"item":4}]` {
		t.Fatalf("outputs %v", out)
	}
	if out[0].UUID == out[1].UUID {
		t.Error("two releases share an output UUID")
	}
}

func TestReleaseWhenSeesTheWholeGroup(t *testing.T) {
	var seen []int
	a, rec := newAgg(t, aggregator.Config{Release: aggregator.ReleaseWhen(func(g aggregator.Group) bool {
		seen = append(seen, len(g.Messages))
		return slices.ContainsFunc(g.Messages, func(m *message.Message) bool { return m.Metadata.Get("last") == "yes" })
	})})
	m3 := part("w", 3, 0)
	m3.Metadata.Set("last", "yes")
	handle(t, a, part("w", 1, 0), part("w", 2, 0), m3)
	if !slices.Equal(seen, []int{1, 2, 3}) {
		t.Errorf("strategy saw groups of sizes %v", seen)
	}
	if out := rec.On("out"); len(out) != 1 || string(out[0].Payload) != `[{"item":1},{"item":2},{"item":3}]` {
		t.Errorf("outputs %v", out)
	}
}

// countingStore counts the Get calls of the store it wraps.
type countingStore struct {
	groupstore.Store
	gets atomic.Int32
}

func (s *countingStore) Get(ctx context.Context, key string) (groupstore.Group, error) {
	s.gets.Add(1)
	return s.Store.Get(ctx, key)
}

func TestReleaseWhenReadsTheGroupOncePerMessage(t *testing.T) {
	store := &countingStore{Store: groupstore.NewMemory()}
	a, rec := newAgg(t, aggregator.Config{Store: store, Release: aggregator.ReleaseWhen(func(g aggregator.Group) bool {
		return len(g.Messages) == 3
	})})
	handle(t, a, part("w", 1, 0), part("w", 2, 0), part("w", 3, 0))
	if len(rec.On("out")) != 1 {
		t.Fatalf("outputs %v, want 1", rec.On("out"))
	}
	if n := store.gets.Load(); n != 3 {
		t.Errorf("%d Gets for 3 messages and a release, want 3", n)
	}
}

func TestMisfitsAreDroppedWithoutReadingTheGroupAgain(t *testing.T) {
	store := &countingStore{Store: groupstore.NewMemory()}
	a, rec := newAgg(t, aggregator.Config{Store: store, DiscardTopic: "discard"})
	// A size that is not the group's does not make the group look
	// complete on arrival, so the misfit is found at the release.
	odd := part("t", 2, 5)
	odd.UUID = "t-odd"
	handle(t, a, part("t", 1, 2), odd)
	before := store.gets.Load()
	handle(t, a, part("t", 2, 2))
	if d := rec.On("discard"); len(d) != 1 || d[0].UUID != odd.UUID {
		t.Fatalf("discards %v, want the odd-sized message", d)
	}
	if out := rec.On("out"); len(out) != 1 || string(out[0].Payload) != `[{"item":1},{"item":2}]` {
		t.Fatalf("outputs %v, want the sequence of size 2", out)
	}
	if n := store.gets.Load() - before; n != 1 {
		t.Errorf("%d Gets to drop the misfit and release the group, want 1", n)
	}
}

func TestReleaseOnTimeoutReleasesTheGroupWhenItsWindowEnds(t *testing.T) {
	a, rec := newAgg(t, aggregator.Config{Release: aggregator.ReleaseOnTimeout(), GroupTimeout: 20 * time.Millisecond, PollInterval: 5 * time.Millisecond})
	handle(t, a, part("win", 1, 2), part("win", 2, 2)) // sequence size is ignored
	runTimeouts(t, a)
	out := rec.WaitFor(t, "out", 1)
	if string(out[0].Payload) != `[{"item":1},{"item":2}]` {
		t.Errorf("payload %s", out[0].Payload)
	}
	if d := rec.On("discard"); len(d) != 0 {
		t.Errorf("discarded %d", len(d))
	}
}

func TestExpiredGroupIsDiscardedByDefault(t *testing.T) {
	a, rec := newAgg(t, aggregator.Config{GroupTimeout: 20 * time.Millisecond, PollInterval: 5 * time.Millisecond, DiscardTopic: "discard"})
	handle(t, a, part("exp", 1, 3), part("exp", 2, 3))
	runTimeouts(t, a)
	d := rec.WaitFor(t, "discard", 2)
	for _, m := range d {
		if m.Metadata.Get(aggregator.DiscardReasonKey) != "expired" {
			t.Errorf("discard reason %q", m.Metadata.Get(aggregator.DiscardReasonKey))
		}
	}
	if ids := []string{d[0].UUID, d[1].UUID}; !slices.Equal(ids, []string{"exp-1", "exp-2"}) {
		t.Errorf("discarded %v", ids)
	}
	// The expired group counts as completed: its last part is late.
	handle(t, a, part("exp", 3, 3))
	if d := rec.WaitFor(t, "discard", 3); d[2].Metadata.Get(aggregator.DiscardReasonKey) != "late" {
		t.Errorf("third discard %v", d[2].Metadata)
	}
	if out := rec.On("out"); len(out) != 0 {
		t.Errorf("outputs %v", out)
	}
}

func TestExpiredGroupSendsAPartialResultWhenConfigured(t *testing.T) {
	a, rec := newAgg(t, aggregator.Config{GroupTimeout: 20 * time.Millisecond, PollInterval: 5 * time.Millisecond,
		SendPartialResultOnExpiry: true, DiscardTopic: "discard"})
	handle(t, a, part("p", 2, 3))
	runTimeouts(t, a)
	out := rec.WaitFor(t, "out", 1)
	if string(out[0].Payload) != `[{"item":2}]` {
		t.Errorf("partial payload %s", out[0].Payload)
	}
	if d := rec.On("discard"); len(d) != 0 {
		t.Errorf("discarded %d", len(d))
	}
}

func TestGroupTimeoutRestartsWithEveryMessageAndReleasedGroupsDoNotExpire(t *testing.T) {
	store := groupstore.NewMemory()
	a, rec := newAgg(t, aggregator.Config{Store: store, GroupTimeout: time.Hour, PollInterval: 5 * time.Millisecond, DiscardTopic: "discard"})
	runTimeouts(t, a)
	handle(t, a, part("t", 1, 2), part("t", 2, 2))
	g, err := store.Get(context.Background(), "t")
	if err != nil {
		t.Fatal(err)
	}
	if !g.Complete || !g.Due.IsZero() {
		t.Errorf("released group: complete %v, due %v", g.Complete, g.Due)
	}
	if len(rec.On("out")) != 1 || len(rec.On("discard")) != 0 {
		t.Error("unexpected outputs or discards")
	}
}

func TestLateMessageToACompletedGroupIsDiscarded(t *testing.T) {
	a, rec := newAgg(t, aggregator.Config{DiscardTopic: "discard"})
	handle(t, a, part("late", 1, 2), part("late", 2, 2))
	extra := part("late", 3, 2)
	handle(t, a, extra)
	d := rec.On("discard")
	if len(d) != 1 || d[0].UUID != extra.UUID || d[0].Metadata.Get(aggregator.DiscardReasonKey) != "late" {
		t.Fatalf("discards %v", d)
	}
	if len(rec.On("out")) != 1 {
		t.Error("the late message changed the output")
	}
}

func TestSecondMessageWithASequenceNumberTheGroupHoldsIsDiscarded(t *testing.T) {
	a, rec := newAgg(t, aggregator.Config{DiscardTopic: "discard"})
	twin := part("d", 1, 3)
	twin.UUID, twin.Payload = "d-1-twin", []byte(`{"item":"twin"}`)
	handle(t, a, part("d", 1, 3), twin, part("d", 2, 3))
	if got := rec.On("out"); len(got) != 0 {
		t.Fatalf("released with a duplicate number: %s", got[0].Payload)
	}
	d := rec.On("discard")
	if len(d) != 1 || d[0].UUID != twin.UUID || d[0].Metadata.Get(aggregator.DiscardReasonKey) != "duplicate sequence number" {
		t.Fatalf("discards %v, want the twin with reason %q", d, "duplicate sequence number")
	}
	handle(t, a, part("d", 3, 3))
	out := rec.On("out")
	if len(out) != 1 || string(out[0].Payload) != `[{"item":1},{"item":2},{"item":3}]` {
		t.Fatalf("outputs %v, want the whole sequence once", out)
	}
}

func TestMessageWhoseSequenceSizeDiffersFromTheGroupsIsDiscarded(t *testing.T) {
	a, rec := newAgg(t, aggregator.Config{DiscardTopic: "discard"})
	odd := part("s", 2, 2)
	odd.UUID = "s-2-of-2"
	handle(t, a, part("s", 1, 3), odd, part("s", 2, 3))
	d := rec.On("discard")
	if len(d) != 1 || d[0].UUID != odd.UUID || d[0].Metadata.Get(aggregator.DiscardReasonKey) != "sequence size mismatch" {
		t.Fatalf("discards %v, want the odd-sized message with reason %q", d, "sequence size mismatch")
	}
	handle(t, a, part("s", 3, 3))
	if out := rec.On("out"); len(out) != 1 || string(out[0].Payload) != `[{"item":1},{"item":2},{"item":3}]` {
		t.Fatalf("outputs %v, want the sequence of size 3", out)
	}
}

func TestDiscardsAreLoggedWithoutADiscardTopic(t *testing.T) {
	logs := watermill.NewCaptureLogger()
	a, rec := newAgg(t, aggregator.Config{Logger: logs})
	handle(t, a, part("l", 1, 1), part("l", 2, 1))
	found := false
	for _, c := range logs.Captured()[watermill.InfoLogLevel] {
		if c.Msg == "Message discarded" && c.Fields["message_uuid"] == "l-2" && c.Fields["reason"] == "late" {
			found = true
		}
	}
	if !found {
		t.Errorf("no discard logged: %v", logs.Captured())
	}
	if len(rec.On("")) != 0 {
		t.Error("published a discard without a topic")
	}
}

func TestExpireGroupsOnCompletionLetsALaterMessageStartANewGroup(t *testing.T) {
	a, rec := newAgg(t, aggregator.Config{ExpireGroupsOnCompletion: true, DiscardTopic: "discard"})
	handle(t, a, part("again", 1, 1))
	handle(t, a, part("again", 2, 1))
	out := rec.On("out")
	if len(out) != 2 || len(rec.On("discard")) != 0 {
		t.Fatalf("outputs %d, discards %d; want 2 and 0", len(out), len(rec.On("discard")))
	}
	if out[0].UUID == out[1].UUID {
		t.Error("releases of two incarnations of a group share an output UUID")
	}
}

func TestMinimumTimeoutForEmptyGroupsRemovesTheCompletedGroup(t *testing.T) {
	store := groupstore.NewMemory()
	a, rec := newAgg(t, aggregator.Config{Store: store, MinimumTimeoutForEmptyGroups: 10 * time.Millisecond,
		PollInterval: 5 * time.Millisecond, DiscardTopic: "discard"})
	handle(t, a, part("e", 1, 1))
	runTimeouts(t, a)
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := store.Get(context.Background(), "e")
		if errors.Is(err, groupstore.ErrNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("completed group still there: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	handle(t, a, part("e", 2, 1)) // a new group, not a late message
	if len(rec.On("out")) != 2 || len(rec.On("discard")) != 0 {
		t.Errorf("outputs %d, discards %d; want 2 and 0", len(rec.On("out")), len(rec.On("discard")))
	}
}

func TestRedeliveredMessageIsCountedOnce(t *testing.T) {
	a, rec := newAgg(t, aggregator.Config{DiscardTopic: "discard"})
	m1 := part("r", 1, 2)
	handle(t, a, m1, m1.Copy(), part("r", 1, 2))
	if len(rec.On("out")) != 0 {
		t.Fatal("a redelivery completed the group")
	}
	handle(t, a, part("r", 2, 2))
	handle(t, a, part("r", 2, 2)) // redelivered after the release
	if len(rec.On("out")) != 1 || len(rec.On("discard")) != 0 {
		t.Errorf("outputs %d, discards %d; want 1 and 0", len(rec.On("out")), len(rec.On("discard")))
	}
}

func TestConfiguredMessageIDRecognisesRedeliveries(t *testing.T) {
	a, rec := newAgg(t, aggregator.Config{MessageID: func(m *message.Message) string { return m.Metadata.Get("sequence_number") }})
	first := part("id", 1, 2)
	again := part("id", 1, 2)
	again.UUID = "a new uuid from the broker"
	handle(t, a, first, again)
	if len(rec.On("out")) != 0 {
		t.Fatal("a redelivery under a new UUID completed the group")
	}
}

func TestFailedPublishIsRetriedOnRedeliveryWithTheSameOutputUUID(t *testing.T) {
	a, rec := newAgg(t, aggregator.Config{})
	handle(t, a, part("f", 1, 2))
	rec.FailNext(1)
	last := part("f", 2, 2)
	if err := a.Handle(last); !errors.Is(err, testpub.ErrPublish) {
		t.Fatalf("Handle with a failing publisher = %v", err)
	}
	handle(t, a, last) // the redelivery
	out := rec.On("out")
	if len(out) != 1 {
		t.Fatalf("outputs %d, want 1", len(out))
	}

	// A second aggregator on a store in the same state publishes the same
	// UUID: output UUIDs depend on the group and the release only.
	b, rec2 := newAgg(t, aggregator.Config{})
	handle(t, b, part("f", 1, 2), part("f", 2, 2))
	c, rec3 := newAgg(t, aggregator.Config{})
	handle(t, c, part("f", 1, 2), part("f", 2, 2))
	if rec2.On("out")[0].UUID == rec3.On("out")[0].UUID {
		t.Error("different incarnations of a group share output UUIDs")
	}
}

func TestHeldGroupLockEndsInLockTimeoutNotAHang(t *testing.T) {
	locks, err := registry.NewLocal()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { locks.Close(context.Background()) })
	a, _ := newAgg(t, aggregator.Config{Locks: locks, LockTimeout: 20 * time.Millisecond})
	l := locks.Obtain(aggregator.DefaultLockPrefix + "busy")
	l.Lock()
	defer l.Unlock()
	if err := a.Handle(part("busy", 1, 2)); !errors.Is(err, aggregator.ErrLockTimeout) {
		t.Errorf("Handle on a locked group = %v, want ErrLockTimeout", err)
	}
}

func TestLostLockStopsTheReleaseBeforeItIsRecorded(t *testing.T) {
	store := groupstore.NewMemory()
	locks, err := registry.NewLocal(registry.WithTTL(50 * time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { locks.Close(context.Background()) })
	a, _ := newAgg(t, aggregator.Config{Publisher: testpub.UntilDone{}, Store: store, Locks: locks,
		Release: aggregator.ReleaseOnCount(1)})
	if err := a.Handle(part("g", 1, 1)); !errors.Is(err, aggregator.ErrLockLost) {
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

func TestLockPrefixSeparatesAggregatorsOnOneRegistry(t *testing.T) {
	locks, err := registry.NewLocal()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { locks.Close(context.Background()) })
	a, rec := newAgg(t, aggregator.Config{Locks: locks, LockPrefix: "invoices:", LockTimeout: 20 * time.Millisecond})
	l := locks.Obtain(aggregator.DefaultLockPrefix + "k") // another aggregator's group lock
	l.Lock()
	defer l.Unlock()
	handle(t, a, part("k", 1, 1))
	if len(rec.On("out")) != 1 {
		t.Fatal("the group was not released")
	}
	held := locks.Obtain("invoices:k")
	held.Lock()
	defer held.Unlock()
	if err := a.Handle(part("k2", 1, 1)); err != nil {
		t.Fatalf("a lock under its prefix for another key blocked the aggregator: %v", err)
	}
	if err := a.Handle(part("k", 2, 2)); !errors.Is(err, aggregator.ErrLockTimeout) {
		t.Errorf("Handle while its own group lock is held = %v, want ErrLockTimeout", err)
	}
}

func TestCorrelationIsConfigurable(t *testing.T) {
	a, rec := newAgg(t, aggregator.Config{Correlation: func(m *message.Message) string { return m.Metadata.Get("customer") }})
	x, y := part("x", 1, 2), part("y", 2, 2) // different correlation ids, one customer
	y.Metadata.Set("customer", x.Metadata.Get("customer"))
	handle(t, a, x, y)
	out := rec.On("out")
	if len(out) != 1 || string(out[0].Payload) != `[{"item":1},{"item":2}]` {
		t.Fatalf("outputs %v, want one group of both messages", out)
	}
	if got := out[0].Metadata.Get("correlation_id"); got != "c-x" {
		t.Errorf("output correlation_id %q, want the group key %q", got, "c-x")
	}
}

func TestOutputFunctionBuildsTheReleasedMessage(t *testing.T) {
	a, rec := newAgg(t, aggregator.Config{Output: func(g aggregator.Group) (*message.Message, error) {
		m := message.NewMessage("ignored", []byte(fmt.Sprintf("%s:%d", g.Key, len(g.Messages))))
		m.Metadata.Set("kind", "total")
		return m, nil
	}})
	handle(t, a, part("o", 1, 2), part("o", 2, 2))
	out := rec.On("out")
	if len(out) != 1 || string(out[0].Payload) != "o:2" || out[0].Metadata.Get("kind") != "total" {
		t.Fatalf("outputs %v, want the output function's message", out)
	}
	if out[0].UUID == "ignored" {
		t.Error("the output kept the function's UUID; it must be the deterministic output UUID")
	}
}

func TestOutputFunctionErrorLeavesTheGroupForARetry(t *testing.T) {
	broken := errors.New("cannot build")
	fail := true
	a, rec := newAgg(t, aggregator.Config{Output: func(g aggregator.Group) (*message.Message, error) {
		if fail {
			return nil, broken
		}
		return aggregator.DefaultOutput(g)
	}})
	handle(t, a, part("e", 1, 2))
	last := part("e", 2, 2)
	if err := a.Handle(last); !errors.Is(err, broken) {
		t.Fatalf("Handle with a failing output function = %v, want its error", err)
	}
	fail = false
	handle(t, a, last) // the redelivery
	if out := rec.On("out"); len(out) != 1 || string(out[0].Payload) != `[{"item":1},{"item":2}]` {
		t.Fatalf("outputs %v after the retry, want the group once", out)
	}
}

func TestMessageWithoutCorrelationKeyIsAnError(t *testing.T) {
	a, _ := newAgg(t, aggregator.Config{})
	if err := a.Handle(message.NewMessage("x", nil)); !errors.Is(err, aggregator.ErrNoCorrelationKey) {
		t.Errorf("Handle = %v, want ErrNoCorrelationKey", err)
	}
	a, _ = newAgg(t, aggregator.Config{MessageID: func(*message.Message) string { return "" }})
	if err := a.Handle(part("k", 1, 1)); !errors.Is(err, aggregator.ErrNoMessageID) {
		t.Errorf("Handle = %v, want ErrNoMessageID", err)
	}
}

func TestInvalidConfigIsRejected(t *testing.T) {
	pub := testpub.NewRecorder()
	for name, cfg := range map[string]aggregator.Config{
		"no publisher":            {OutputTopic: "o"},
		"no topic":                {Publisher: pub},
		"discard publisher alone": {Publisher: pub, OutputTopic: "o", DiscardPublisher: pub},
		"negative timeout":        {Publisher: pub, OutputTopic: "o", GroupTimeout: -1},
		"zero count":              {Publisher: pub, OutputTopic: "o", Release: aggregator.ReleaseOnCount(0)},
		"nil function":            {Publisher: pub, OutputTopic: "o", Release: aggregator.ReleaseWhen(nil)},
		"timeout without timeout": {Publisher: pub, OutputTopic: "o", Release: aggregator.ReleaseOnTimeout()},
	} {
		if _, err := aggregator.New(cfg); !errors.Is(err, aggregator.ErrInvalidConfig) {
			t.Errorf("%s: New = %v, want ErrInvalidConfig", name, err)
		}
	}
}

func TestDefaultOutputEncodesNonJSONPayloadsAsBase64(t *testing.T) {
	a := message.NewMessage("a", []byte("plain"))
	b := message.NewMessage("b", []byte(`"json"`))
	out, err := aggregator.DefaultOutput(aggregator.Group{Key: "k", Messages: []*message.Message{a, b}})
	if err != nil {
		t.Fatal(err)
	}
	if got := string(out.Payload); got != `["cGxhaW4=","json"]` {
		t.Errorf("payload %s", got)
	}
}

// TestAggregatorOnARouterReleasesEachGroupOnce runs two aggregators, as two
// instances sharing a store and a lock registry, on routers that both see
// every message of a GoChannel topic delivered concurrently and out of
// order.
func TestAggregatorOnARouterReleasesEachGroupOnce(t *testing.T) {
	const groups, size = 20, 5
	logger := watermill.NopLogger{}
	pubSub := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: groups * size}, logger)
	store, locks := groupstore.NewMemory(), newLocal(t)
	t.Cleanup(func() { locks.Close(context.Background()) })

	outputs, err := pubSub.Subscribe(context.Background(), "orders.aggregated")
	if err != nil {
		t.Fatal(err)
	}
	var routers []*message.Router
	for i := range 2 {
		r, err := message.NewRouter(message.RouterConfig{}, logger)
		if err != nil {
			t.Fatal(err)
		}
		a, err := aggregator.New(aggregator.Config{Publisher: pubSub, OutputTopic: "orders.aggregated", Store: store, Locks: locks,
			GroupTimeout: time.Hour, DiscardTopic: "orders.discarded"})
		if err != nil {
			t.Fatal(err)
		}
		a.AddHandler(r, fmt.Sprintf("aggregator-%d", i), "orders", pubSub)
		routers = append(routers, r)
		done := make(chan struct{})
		go func() { defer close(done); r.Run(context.Background()) }()
		t.Cleanup(func() { r.Close(); <-done })
		<-r.Running()
	}
	var msgs []*message.Message
	for i := 1; i <= size; i++ {
		for g := range groups {
			msgs = append(msgs, part(fmt.Sprintf("order-%d", g), size+1-i, size))
		}
	}
	if err := pubSub.Publish("orders", msgs...); err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	timeout := time.After(20 * time.Second)
	for len(seen) < groups {
		select {
		case m := <-outputs:
			key := m.Metadata.Get("correlation_id")
			if prev, ok := seen[key]; ok {
				t.Fatalf("group %s released twice (%s, %s)", key, prev, m.UUID)
			}
			seen[key] = m.UUID
			if want := `[{"item":1},{"item":2},{"item":3},{"item":4},{"item":5}]`; string(m.Payload) != want {
				t.Errorf("group %s: %s", key, m.Payload)
			}
			m.Ack()
		case <-timeout:
			t.Fatalf("released %d of %d groups", len(seen), groups)
		}
	}
	for _, r := range routers {
		if err := r.Close(); err != nil {
			t.Error(err)
		}
	}
	select {
	case m, ok := <-outputs:
		if ok {
			t.Errorf("extra output %s of %s", m.UUID, m.Metadata.Get("correlation_id"))
		}
	default:
	}
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

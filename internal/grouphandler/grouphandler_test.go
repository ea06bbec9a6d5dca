package grouphandler

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"go.uber.org/goleak"

	"github.com/lockreg/lockreg/groupstore"
	"github.com/lockreg/lockreg/internal/testpub"
	"github.com/lockreg/lockreg/registry"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testKind returns a complete Kind.
func testKind() Kind {
	return Kind{
		Name:             "test",
		DiscardReasonKey: "reason",
		Defaults:         Defaults{LockPrefix: "test:", LockTimeout: time.Second, PollInterval: time.Second, CorrelationIDKey: "cid"},
		Errors: Errors{NoCorrelationKey: errors.New("a"), NoMessageID: errors.New("b"),
			LockTimeout: errors.New("c"), LockLost: errors.New("d")},
	}
}

func TestNewPanicsOnAnIncompleteKind(t *testing.T) {
	complete := testKind()
	New(complete, Settings{}) // must not panic
	for name, drop := range map[string]func(*Kind){
		"Name":                      func(k *Kind) { k.Name = "" },
		"DiscardReasonKey":          func(k *Kind) { k.DiscardReasonKey = "" },
		"Defaults.LockPrefix":       func(k *Kind) { k.Defaults.LockPrefix = "" },
		"Defaults.LockTimeout":      func(k *Kind) { k.Defaults.LockTimeout = 0 },
		"Defaults.PollInterval":     func(k *Kind) { k.Defaults.PollInterval = 0 },
		"Defaults.CorrelationIDKey": func(k *Kind) { k.Defaults.CorrelationIDKey = "" },
		"Errors.NoCorrelationKey":   func(k *Kind) { k.Errors.NoCorrelationKey = nil },
		"Errors.NoMessageID":        func(k *Kind) { k.Errors.NoMessageID = nil },
		"Errors.LockTimeout":        func(k *Kind) { k.Errors.LockTimeout = nil },
		"Errors.LockLost":           func(k *Kind) { k.Errors.LockLost = nil },
	} {
		k := complete
		drop(&k)
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("New without %s did not panic", name)
				}
			}()
			New(k, Settings{})
		}()
	}
}

// lostLocks hands out locks that are taken at once and whose hold is over
// from the start: Done is closed.
type lostLocks struct{}

func (lostLocks) Obtain(key string) registry.Lock { return lostLock{} }

// lostLock implements the rest of registry.Lock by panicking.
type lostLock struct{ anyLock }

type anyLock = registry.Lock

func (lostLock) TryLockContext(context.Context) (bool, error) { return true, nil }
func (lostLock) UnlockContext(context.Context) error          { return nil }
func (lostLock) Done() <-chan struct{}                        { return closed }

var closed = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func TestWorkOnALostHoldChangesAndPublishesNothing(t *testing.T) {
	ctx := context.Background()
	store := groupstore.NewMemory()
	g, _, err := store.Add(ctx, "g", groupstore.Message{UUID: "m1"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	pub := testpub.NewRecorder()
	k := testKind()
	c := New(k, Settings{Publisher: pub, OutputTopic: "out", DiscardTopic: "discard", Store: store, Locks: lostLocks{},
		Logger: watermill.NopLogger{}})
	err = c.WithLock(ctx, "g", func(ctx context.Context) error {
		if _, _, err := c.Add(ctx, "g", "m2", message.NewMessage("m2", nil)); !errors.Is(err, k.Errors.LockLost) {
			t.Errorf("Add: %v, want LockLost", err)
		}
		if err := c.Discard(ctx, "g", []*message.Message{message.NewMessage("d1", nil)}); !errors.Is(err, k.Errors.LockLost) {
			t.Errorf("Discard: %v, want LockLost", err)
		}
		return c.Commit(ctx, g, c.Completion(g), false, []*message.Message{message.NewMessage("out", nil)})
	})
	if !errors.Is(err, k.Errors.LockLost) {
		t.Errorf("WithLock: %v, want LockLost", err)
	}
	if n := len(pub.On("out")) + len(pub.On("discard")); n != 0 {
		t.Errorf("%d message(s) published without the lock", n)
	}
	if after, err := store.Get(ctx, "g"); err != nil || after.Complete || after.Version != g.Version {
		t.Errorf("group after work on a lost hold: %+v, %v; want it unchanged", after, err)
	}
}

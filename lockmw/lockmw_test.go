package lockmw_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/lockreg/lockreg/lockmw"
	"github.com/lockreg/lockreg/registry"
)

// Four instances with four workers each handle 600 messages of three keys:
// never two handlers of one key at once, and each key's tokens increase in
// the order its handlers ran.
func TestPerKeyRunsOneHandlerOfAKeyAtATimeAcrossInstances(t *testing.T) {
	insts := newInstances(t, 4)
	keys := []string{"a", "b", "c"}
	var (
		flight    inFlight
		handled   atomic.Int64
		tokenMu   sync.Mutex
		lastToken = map[string]int64{}
		disorder  atomic.Int64
	)
	handler := handlerFunc(func(m *message.Message) error {
		key := m.Metadata.Get("entity_id")
		flight.enter(key)
		defer flight.leave(key)
		tok, _ := lockmw.Token(m.Context())
		tokenMu.Lock()
		if tok <= lastToken[key] {
			disorder.Add(1)
		}
		lastToken[key] = tok
		tokenMu.Unlock()
		runtime.Gosched() // let a second handler of the key in, were it allowed
		handled.Add(1)
		return nil
	})
	msgs := make(chan *message.Message, 600)
	for i := range 600 {
		msgs <- msgFor(keys[i%len(keys)])
	}
	close(msgs)
	var wg sync.WaitGroup
	for _, inst := range insts {
		h := chain(handler, perKey(t, inst.locks, lockmw.WithLockTimeout(time.Minute)))
		for range 4 {
			wg.Go(func() {
				for m := range msgs {
					if _, err := h(m); err != nil {
						t.Errorf("message of %s: %v", m.Metadata.Get("entity_id"), err)
					}
				}
			})
		}
	}
	wg.Wait()
	if flight.most != 1 {
		t.Errorf("up to %d handlers of one key ran at once, want 1", flight.most)
	}
	if n := disorder.Load(); n != 0 {
		t.Errorf("%d handlers saw a token not greater than the previous handler's of the key", n)
	}
	if n := handled.Load(); n != 600 {
		t.Errorf("%d messages handled, want 600", n)
	}
}

// The handler of one key waits for the handler of another to start, in
// another instance, and the other for it: both run at once.
func TestPerKeyRunsHandlersOfDifferentKeysInParallel(t *testing.T) {
	insts := newInstances(t, 2)
	started := map[string]chan struct{}{"a": make(chan struct{}), "b": make(chan struct{})}
	other := map[string]string{"a": "b", "b": "a"}
	handler := handlerFunc(func(m *message.Message) error {
		key := m.Metadata.Get("entity_id")
		close(started[key])
		select {
		case <-started[other[key]]:
			return nil
		case <-time.After(30 * time.Second):
			return fmt.Errorf("the handler of %s never started while %s's ran", other[key], key)
		}
	})
	var wg sync.WaitGroup
	for i, key := range []string{"a", "b"} {
		h := chain(handler, perKey(t, insts[i].locks))
		wg.Go(func() {
			if _, err := h(msgFor(key)); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
}

// The handler finds its hold's token in the message's context; the next
// hold of the key, in another instance, has a greater one.
func TestPerKeyPutsTheHoldsTokenInTheMessageContext(t *testing.T) {
	insts := newInstances(t, 2)
	var got int64
	var ok bool
	h := chain(handlerFunc(func(m *message.Message) error {
		got, ok = lockmw.Token(m.Context())
		return nil
	}), perKey(t, insts[0].locks))
	if _, err := h(msgFor("k")); err != nil {
		t.Fatal(err)
	}
	if !ok || got <= 0 {
		t.Fatalf("Token in the handler = %d, %t; want a positive token", got, ok)
	}
	l := insts[1].locks.Obtain(lockmw.DefaultPrefix + "k")
	l.Lock()
	defer l.Unlock()
	if next := l.Token(); next <= got {
		t.Errorf("the next hold's token %d is not greater than the handler's %d", next, got)
	}
	if _, ok := lockmw.Token(context.Background()); ok {
		t.Error("Token reports a hold for a context of none")
	}
}

// A handler that runs four renewals long, longer than the TTL, keeps the
// lease: its context is not cancelled, the key stays locked for other
// instances all along, and its result is kept.
func TestPerKeyRenewsTheLeaseWhileTheHandlerRuns(t *testing.T) {
	insts := newInstances(t, 2)
	const ttl = 2400 * time.Millisecond // renewed every 800 ms, given up 1.9 s after a renewal
	h := chain(handlerFunc(func(m *message.Message) error {
		for insts[0].faults.renewals.Load() < 4 {
			if !keyHeld(t, insts[1], lockmw.DefaultPrefix+"k") {
				return errors.New("another instance could take the key while the handler ran")
			}
			select {
			case <-m.Context().Done():
				return fmt.Errorf("the handler's context ended: %w", context.Cause(m.Context()))
			case <-time.After(10 * time.Millisecond):
			}
		}
		return nil
	}), perKey(t, insts[0].locks, lockmw.WithTTL(ttl)))
	start := time.Now()
	if _, err := h(msgFor("k")); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < ttl {
		t.Fatalf("the handler ran %v, less than the TTL %v: the test proves nothing", d, ttl)
	}
}

// When renewals stall, as when the database is out of reach, the handler's
// context is cancelled with a cause wrapping ErrLockLost before the lease
// (the middleware's TTL, not the registry's) can expire, and the run is
// nacked although the handler returned nil.
func TestPerKeyCancelsTheContextAndNacksWhenTheLeaseIsNotRenewed(t *testing.T) {
	insts := newInstances(t, 1, registry.WithTTL(time.Hour))
	insts[0].faults.stallRenew.Store(true)
	var cause error
	h := chain(handlerFunc(func(m *message.Message) error {
		if err := awaitCancel(m.Context()); err != nil {
			t.Error(err)
		}
		cause = context.Cause(m.Context())
		return nil
	}), perKey(t, insts[0].locks, lockmw.WithTTL(300*time.Millisecond)))
	out, err := h(msgFor("k"))
	if !errors.Is(cause, lockmw.ErrLockLost) {
		t.Errorf("the handler's context ended with cause %v, want one wrapping ErrLockLost", cause)
	}
	if !errors.Is(err, lockmw.ErrLockLost) || out != nil {
		t.Errorf("PerKey returned %v, %v; want no messages and an error wrapping ErrLockLost", out, err)
	}
}

// A handler that fails after its lease was lost gets both errors back.
func TestPerKeyReturnsTheHandlersErrorWithErrLockLost(t *testing.T) {
	insts := newInstances(t, 1)
	insts[0].faults.stallRenew.Store(true)
	failure := errors.New("write refused")
	h := chain(handlerFunc(func(m *message.Message) error {
		if err := awaitCancel(m.Context()); err != nil {
			t.Error(err)
		}
		return failure
	}), perKey(t, insts[0].locks, lockmw.WithTTL(300*time.Millisecond)))
	_, err := h(msgFor("k"))
	if !errors.Is(err, lockmw.ErrLockLost) || !errors.Is(err, failure) {
		t.Errorf("PerKey returned %v, want an error wrapping ErrLockLost and the handler's error", err)
	}
}

// A run whose unlock finds the lease lost is nacked: its work may have
// overlapped another holder's.
func TestPerKeyNacksWhenTheUnlockFindsTheLeaseLost(t *testing.T) {
	insts := newInstances(t, 1)
	insts[0].faults.loseRelease.Store(true)
	h := chain(handlerFunc(func(*message.Message) error { return nil }), perKey(t, insts[0].locks))
	if _, err := h(msgFor("k")); !errors.Is(err, lockmw.ErrLockLost) || !errors.Is(err, registry.ErrLockLost) {
		t.Errorf("PerKey returned %v, want an error wrapping lockmw.ErrLockLost and registry.ErrLockLost", err)
	}
}

// While another instance holds the key, the message waits for the lock
// timeout and fails with ErrLockTimeout, without running the handler.
func TestPerKeyReturnsErrLockTimeoutWhileAnotherInstanceHoldsTheKey(t *testing.T) {
	insts := newInstances(t, 2)
	l := insts[1].locks.Obtain(lockmw.DefaultPrefix + "k")
	l.Lock()
	defer l.Unlock()
	ran := false
	h := chain(handlerFunc(func(*message.Message) error { ran = true; return nil }),
		perKey(t, insts[0].locks, lockmw.WithLockTimeout(50*time.Millisecond)))
	if _, err := h(msgFor("k")); !errors.Is(err, lockmw.ErrLockTimeout) {
		t.Errorf("PerKey returned %v, want an error wrapping ErrLockTimeout", err)
	}
	if ran {
		t.Error("the handler ran without the lock")
	}
}

// The prefix forms the lock key: a lock of the key under another prefix
// does not block the message, one under its own does.
func TestPerKeyLocksThePrefixedKey(t *testing.T) {
	insts := newInstances(t, 2)
	l := insts[1].locks.Obtain(lockmw.DefaultPrefix + "k")
	l.Lock()
	defer l.Unlock()
	ok := handlerFunc(func(*message.Message) error { return nil })
	if _, err := chain(ok, perKey(t, insts[0].locks, lockmw.WithPrefix("orders:")))(msgFor("k")); err != nil {
		t.Errorf("blocked by the lock of another prefix: %v", err)
	}
	o := insts[1].locks.Obtain("orders:k")
	o.Lock()
	defer o.Unlock()
	h := chain(ok, perKey(t, insts[0].locks, lockmw.WithPrefix("orders:"), lockmw.WithLockTimeout(50*time.Millisecond)))
	if _, err := h(msgFor("k")); !errors.Is(err, lockmw.ErrLockTimeout) {
		t.Errorf("PerKey returned %v while orders:k was held, want ErrLockTimeout", err)
	}
}

// A message without a key fails with ErrNoKey; the handler does not run.
func TestPerKeyFailsAMessageWithoutAKey(t *testing.T) {
	insts := newInstances(t, 1)
	ran := false
	h := chain(handlerFunc(func(*message.Message) error { ran = true; return nil }), perKey(t, insts[0].locks))
	if _, err := h(msgFor("")); !errors.Is(err, lockmw.ErrNoKey) {
		t.Errorf("PerKey returned %v, want an error wrapping ErrNoKey", err)
	}
	if ran {
		t.Error("the handler ran for a message without a key")
	}
}

// With RunWithoutLock a message without a key runs, and its context
// carries no token.
func TestPerKeyRunsAMessageWithoutAKeyUnlockedWithRunWithoutLock(t *testing.T) {
	insts := newInstances(t, 1)
	ran, hasToken := false, true
	h := chain(handlerFunc(func(m *message.Message) error {
		ran = true
		_, hasToken = lockmw.Token(m.Context())
		return nil
	}), perKey(t, insts[0].locks, lockmw.WithMissingKey(lockmw.RunWithoutLock)))
	if _, err := h(msgFor("")); err != nil {
		t.Fatal(err)
	}
	if !ran || hasToken {
		t.Errorf("handler ran %t, with a token %t; want it run without one", ran, hasToken)
	}
}

// A key function's error fails the message with ErrNoKey and that error,
// whatever the missing-key policy; the handler does not run.
func TestPerKeyFailsAMessageWhoseKeyFunctionFails(t *testing.T) {
	insts := newInstances(t, 1)
	bad := errors.New("payload is not JSON")
	mw, err := lockmw.PerKey(insts[0].locks, lockmw.KeyFromPayload(func([]byte) (string, error) { return "", bad }),
		lockmw.WithMissingKey(lockmw.RunWithoutLock))
	if err != nil {
		t.Fatal(err)
	}
	ran := false
	h := chain(handlerFunc(func(*message.Message) error { ran = true; return nil }), mw)
	if _, err := h(msgFor("k")); !errors.Is(err, lockmw.ErrNoKey) || !errors.Is(err, bad) {
		t.Errorf("PerKey returned %v, want an error wrapping ErrNoKey and the key function's error", err)
	}
	if ran {
		t.Error("the handler ran for a message whose key function failed")
	}
}

// KeyFromPayload keys a message by what its function reads from the
// payload.
func TestKeyFromPayloadAppliesItsFunctionToThePayload(t *testing.T) {
	f := lockmw.KeyFromPayload(func(p []byte) (string, error) { return "id-" + string(p), nil })
	if k, err := f(message.NewMessage("u", []byte("7"))); k != "id-7" || err != nil {
		t.Errorf("key = %q, %v; want id-7", k, err)
	}
}

// After the handler returns, the message has its own context back, and the
// context the handler had is cancelled.
func TestPerKeyPutsTheMessagesContextBack(t *testing.T) {
	insts := newInstances(t, 1)
	type ctxKey struct{}
	orig := context.WithValue(context.Background(), ctxKey{}, "orig")
	var inner context.Context
	h := chain(handlerFunc(func(m *message.Message) error { inner = m.Context(); return nil }), perKey(t, insts[0].locks))
	m := msgFor("k")
	m.SetContext(orig)
	if _, err := h(m); err != nil {
		t.Fatal(err)
	}
	if m.Context() != orig {
		t.Error("the message's context was not put back")
	}
	if inner.Err() == nil {
		t.Error("the handler's context is still live after the unlock")
	}
	if inner.Value(ctxKey{}) != "orig" {
		t.Error("the handler's context does not derive from the message's")
	}
}

// A handler that panics leaves the key unlocked; the panic goes on.
func TestPerKeyUnlocksWhenTheHandlerPanics(t *testing.T) {
	insts := newInstances(t, 2)
	h := chain(handlerFunc(func(*message.Message) error { panic("boom") }), perKey(t, insts[0].locks))
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Errorf("recovered %v, want the handler's panic", r)
			}
		}()
		h(msgFor("k"))
	}()
	if keyHeld(t, insts[1], lockmw.DefaultPrefix+"k") {
		t.Error("the key is still locked after the handler panicked")
	}
}

// PerKey refuses a nil registry or key function and invalid options.
func TestPerKeyRejectsInvalidArguments(t *testing.T) {
	reg, err := registry.NewLocal()
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close(context.Background())
	key := lockmw.KeyFromMetadata("entity_id")
	for _, c := range []struct {
		name  string
		locks registry.LockRegistry
		key   lockmw.KeyFunc
		opts  []lockmw.Option
	}{
		{"nil registry", nil, key, nil},
		{"nil key function", reg, nil, nil},
		{"KeyFromPayload(nil)", reg, lockmw.KeyFromPayload(nil), nil},
		{"zero TTL", reg, key, []lockmw.Option{lockmw.WithTTL(0)}},
		{"negative lock timeout", reg, key, []lockmw.Option{lockmw.WithLockTimeout(-time.Second)}},
		{"unknown missing-key policy", reg, key, []lockmw.Option{lockmw.WithMissingKey(7)}},
	} {
		if _, err := lockmw.PerKey(c.locks, c.key, c.opts...); !errors.Is(err, lockmw.ErrInvalidOption) {
			t.Errorf("%s: PerKey returned %v, want an error wrapping ErrInvalidOption", c.name, err)
		}
	}
}

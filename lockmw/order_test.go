package lockmw_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/lockreg/lockreg/aggregator"
	"github.com/lockreg/lockreg/internal/testpub"
	"github.com/lockreg/lockreg/lockmw"
)

// These tests check what the package documentation says of the order of
// middlewares, with Watermill's own Retry, PoisonQueue and Deduplicator.

// runRouter runs h behind mws, added with router.AddMiddleware(mws...), on
// a GoChannel whose Publish returns once the message is acked; it returns
// the function that publishes one message. The router stops when t ends.
func runRouter(t *testing.T, h message.NoPublishHandlerFunc, mws ...message.HandlerMiddleware) func(*message.Message) {
	t.Helper()
	logger := watermill.NopLogger{}
	pubSub := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, logger)
	r, err := message.NewRouter(message.RouterConfig{}, logger)
	if err != nil {
		t.Fatal(err)
	}
	r.AddMiddleware(mws...)
	r.AddConsumerHandler("entities", "entities", pubSub, h)
	done := make(chan struct{})
	go func() { defer close(done); r.Run(context.Background()) }()
	t.Cleanup(func() { r.Close(); <-done; pubSub.Close() })
	<-r.Running()
	return func(m *message.Message) {
		if err := pubSub.Publish("entities", m); err != nil {
			t.Fatal(err)
		}
	}
}

// retry is a Retry middleware that retries at once and calls hook with the
// error of each failed attempt; hook decides whether to retry.
func retry(hook func(error) bool) middleware.Retry {
	return middleware.Retry{
		MaxRetries:      5,
		InitialInterval: time.Millisecond,
		ShouldRetry:     func(p middleware.RetryParams) bool { return hook(p.Err) },
	}
}

func poisonQueue(t *testing.T, pub message.Publisher) message.HandlerMiddleware {
	t.Helper()
	pq, err := middleware.PoisonQueue(pub, "poison")
	if err != nil {
		t.Fatal(err)
	}
	return pq
}

// In the recommended order a lock timeout goes to Retry, whose next
// attempt, after the holder let go, takes the lock and runs the handler;
// nothing reaches the poison queue.
func TestRecommendedOrderRetriesALockTimeoutOnceTheKeyIsFree(t *testing.T) {
	insts := newInstances(t, 2)
	holder := insts[1].locks.Obtain(lockmw.DefaultPrefix + "k")
	holder.Lock()
	release := sync.OnceFunc(holder.Unlock)
	var retried []error
	var ran atomic.Int64
	poison := testpub.NewRecorder()
	publish := runRouter(t, func(*message.Message) error { ran.Add(1); return nil },
		poisonQueue(t, poison),
		retry(func(err error) bool {
			retried = append(retried, err)
			release()
			return true
		}).Middleware,
		perKey(t, insts[0].locks, lockmw.WithLockTimeout(100*time.Millisecond)))
	publish(msgFor("k"))
	if len(retried) == 0 || slices.ContainsFunc(retried, func(err error) bool { return !errors.Is(err, lockmw.ErrLockTimeout) }) {
		t.Errorf("Retry saw %v, want ErrLockTimeout (once, unless the machine stalls the retry past its wait)", retried)
	}
	if n := ran.Load(); n != 1 {
		t.Errorf("the handler ran %d times, want once", n)
	}
	if n := len(poison.On("poison")); n != 0 {
		t.Errorf("%d messages in the poison queue, want none", n)
	}
}

// In the recommended order a run whose lease was lost is retried; the
// retry runs on a live context, under a newer hold.
func TestRecommendedOrderRetriesARunWhoseLeaseWasLost(t *testing.T) {
	insts := newInstances(t, 1)
	insts[0].faults.stallRenew.Store(true)
	var tokens []int64
	var retried []error
	publish := runRouter(t, func(m *message.Message) error {
		tok, _ := lockmw.Token(m.Context())
		tokens = append(tokens, tok)
		if len(tokens) == 1 {
			if err := awaitCancel(m.Context()); err != nil { // the lease is not renewed
				t.Error(err)
			}
			return m.Context().Err()
		}
		return m.Context().Err()
	},
		retry(func(err error) bool {
			retried = append(retried, err)
			insts[0].faults.stallRenew.Store(false)
			return true
		}).Middleware,
		perKey(t, insts[0].locks, lockmw.WithTTL(300*time.Millisecond)))
	publish(msgFor("k"))
	if len(retried) != 1 || !errors.Is(retried[0], lockmw.ErrLockLost) {
		t.Errorf("Retry saw %v, want one ErrLockLost", retried)
	}
	if len(tokens) != 2 || tokens[1] <= tokens[0] {
		t.Errorf("the attempts ran with tokens %v, want two, increasing", tokens)
	}
}

// In the recommended order, with a ShouldRetry that skips ErrNoKey, a
// message without a key goes to the poison queue at once, unhandled.
func TestRecommendedOrderSendsAMessageWithoutAKeyToThePoisonQueue(t *testing.T) {
	insts := newInstances(t, 1)
	poison := testpub.NewRecorder()
	var ran, attempts atomic.Int64
	publish := runRouter(t, func(*message.Message) error { ran.Add(1); return nil },
		poisonQueue(t, poison),
		retry(func(err error) bool { attempts.Add(1); return !errors.Is(err, lockmw.ErrNoKey) }).Middleware,
		perKey(t, insts[0].locks))
	m := msgFor("")
	publish(m)
	got := poison.On("poison")
	if len(got) != 1 || got[0].UUID != m.UUID {
		t.Fatalf("poison queue holds %d messages, want the one without a key", len(got))
	}
	if reason := got[0].Metadata.Get(middleware.ReasonForPoisonedKey); !strings.Contains(reason, lockmw.ErrNoKey.Error()) {
		t.Errorf("poison reason %q does not name ErrNoKey", reason)
	}
	if ran.Load() != 0 || attempts.Load() != 1 {
		t.Errorf("handler ran %d times after %d failed attempts, want 0 after 1", ran.Load(), attempts.Load())
	}
}

// With PoisonQueueWithFilter refusing ErrLockTimeout, a message that
// could not get its lock in any attempt is nacked for redelivery, not
// poisoned.
func TestPoisonQueueWithFilterNacksLockTimeouts(t *testing.T) {
	insts := newInstances(t, 2)
	holder := insts[1].locks.Obtain(lockmw.DefaultPrefix + "k")
	holder.Lock()
	defer holder.Unlock()
	poison := testpub.NewRecorder()
	pq, err := middleware.PoisonQueueWithFilter(poison, "poison", func(err error) bool {
		return !errors.Is(err, lockmw.ErrLockTimeout)
	})
	if err != nil {
		t.Fatal(err)
	}
	h := chain(handlerFunc(func(*message.Message) error { return nil }),
		pq, middleware.Retry{MaxRetries: 2, InitialInterval: time.Millisecond}.Middleware,
		perKey(t, insts[0].locks, lockmw.WithLockTimeout(10*time.Millisecond)))
	if _, err := h(msgFor("k")); !errors.Is(err, lockmw.ErrLockTimeout) {
		t.Errorf("got %v, want ErrLockTimeout returned for a nack", err)
	}
	if n := len(poison.On("poison")); n != 0 {
		t.Errorf("%d messages poisoned, want none", n)
	}
}

// Retry inside the lock holds the key through its backoff: another
// instance cannot take it between the attempts.
func TestRetryInsidePerKeyHoldsTheKeyThroughItsBackoff(t *testing.T) {
	insts := newInstances(t, 2)
	var heldBetween []bool
	attempts := 0
	h := chain(handlerFunc(func(*message.Message) error {
		if attempts++; attempts == 1 {
			return errors.New("first attempt fails")
		}
		return nil
	}), perKey(t, insts[0].locks), retry(func(error) bool {
		heldBetween = append(heldBetween, keyHeld(t, insts[1], lockmw.DefaultPrefix+"k"))
		return true
	}).Middleware)
	if _, err := h(msgFor("k")); err != nil {
		t.Fatal(err)
	}
	if len(heldBetween) != 1 || !heldBetween[0] {
		t.Errorf("key held by the first instance between the attempts: %v, want [true]", heldBetween)
	}
}

// keyRepo is a Deduplicator repository that remembers keys forever; unlike
// Watermill's map repository it starts no goroutine.
type keyRepo struct {
	mu   sync.Mutex
	seen map[string]bool
}

func (r *keyRepo) IsDuplicate(_ context.Context, key string) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen == nil {
		r.seen = map[string]bool{}
	}
	dup := r.seen[key]
	r.seen[key] = true
	return dup, nil
}

func dedup() *middleware.Deduplicator {
	return &middleware.Deduplicator{
		KeyFactory: func(m *message.Message) (string, error) { return m.UUID, nil },
		Repository: &keyRepo{},
	}
}

// A Deduplicator inside Retry takes the second attempt for a duplicate:
// the message is acked without its handler ever running.
func TestDeduplicatorInsideRetryAcksTheRetriedAttemptUnhandled(t *testing.T) {
	insts := newInstances(t, 2)
	holder := insts[1].locks.Obtain(lockmw.DefaultPrefix + "k")
	holder.Lock()
	release := sync.OnceFunc(holder.Unlock)
	ran := 0
	h := chain(handlerFunc(func(*message.Message) error { ran++; return nil }),
		retry(func(error) bool { release(); return true }).Middleware,
		dedup().Middleware,
		perKey(t, insts[0].locks, lockmw.WithLockTimeout(100*time.Millisecond)))
	if _, err := h(msgFor("k")); err != nil {
		t.Fatal(err)
	}
	if ran != 0 {
		t.Errorf("the handler ran %d times; the Deduplicator inside Retry was expected to drop the retry", ran)
	}
}

// A Deduplicator outside Retry lets the retried attempt run.
func TestDeduplicatorOutsideRetryLetsTheRetriedAttemptRun(t *testing.T) {
	insts := newInstances(t, 2)
	holder := insts[1].locks.Obtain(lockmw.DefaultPrefix + "k")
	holder.Lock()
	release := sync.OnceFunc(holder.Unlock)
	ran := 0
	h := chain(handlerFunc(func(*message.Message) error { ran++; return nil }),
		dedup().Middleware,
		retry(func(error) bool { release(); return true }).Middleware,
		perKey(t, insts[0].locks, lockmw.WithLockTimeout(100*time.Millisecond)))
	if _, err := h(msgFor("k")); err != nil {
		t.Fatal(err)
	}
	if ran != 1 {
		t.Errorf("the handler ran %d times, want once", ran)
	}
}

// aggregate returns an aggregator on locks that releases every two
// messages of a correlation id to out, with a short lock timeout.
func aggregate(t *testing.T, insts []*instance, out message.Publisher) *aggregator.Aggregator {
	t.Helper()
	agg, err := aggregator.New(aggregator.Config{
		Publisher: out, OutputTopic: "aggregated", Release: aggregator.ReleaseOnCount(2),
		Locks: insts[0].locks, LockTimeout: 50 * time.Millisecond, Logger: watermill.NopLogger{},
	})
	if err != nil {
		t.Fatal(err)
	}
	return agg
}

func correlated(id string) *message.Message {
	m := message.NewMessage(watermill.NewUUID(), []byte(`"x"`))
	m.Metadata.Set(aggregator.CorrelationIDKey, id)
	return m
}

// PerKey keyed by the correlation id in front of an aggregator on the same
// registry takes a lock of its own prefix: the aggregator still gets its
// group lock and releases the group.
func TestPerKeyInFrontOfTheAggregatorTakesALockOfItsOwn(t *testing.T) {
	insts := newInstances(t, 1)
	out := testpub.NewRecorder()
	agg := aggregate(t, insts, out)
	mw, err := lockmw.PerKey(insts[0].locks, lockmw.KeyFromMetadata(aggregator.CorrelationIDKey))
	if err != nil {
		t.Fatal(err)
	}
	h := chain(handlerFunc(agg.Handle), mw)
	for range 2 {
		if _, err := h(correlated("order-1")); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(out.On("aggregated")); n != 1 {
		t.Errorf("%d outputs, want 1", n)
	}
}

// With the aggregator's lock prefix on the same registry the aggregator
// waits for the middleware's own lock, which is not reentrant, and fails
// with its lock timeout.
func TestPerKeyWithTheAggregatorsPrefixMakesItTimeOut(t *testing.T) {
	insts := newInstances(t, 1)
	agg := aggregate(t, insts, testpub.NewRecorder())
	mw, err := lockmw.PerKey(insts[0].locks, lockmw.KeyFromMetadata(aggregator.CorrelationIDKey),
		lockmw.WithPrefix(aggregator.DefaultLockPrefix))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := chain(handlerFunc(agg.Handle), mw)(correlated("order-1")); !errors.Is(err, aggregator.ErrLockTimeout) {
		t.Errorf("got %v, want the aggregator's ErrLockTimeout", err)
	}
}

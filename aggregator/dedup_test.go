package aggregator_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/lockreg/lockreg/aggregator"
	"github.com/lockreg/lockreg/internal/testpub"
)

// These tests check what the package documentation says of Watermill's
// Deduplicator middleware behind an aggregator's output topic.

// consumer is a router handler behind a Deduplicator on topic; it counts
// the calls of its handler and fails the first failFirst of them.
type consumer struct {
	mu        sync.Mutex
	calls     []string // UUIDs
	failFirst int
}

var errConsumer = errors.New("consumer failed")

func (c *consumer) handle(m *message.Message) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls = append(c.calls, m.UUID)
	if len(c.calls) <= c.failFirst {
		return errConsumer
	}
	return nil
}

func (c *consumer) handled() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.calls...)
}

// runConsumer runs c behind dedup on topic of a GoChannel whose Publish
// returns only once the consumer has acked, so that when Publish returns
// the consumer is done with the message. It returns that GoChannel.
func runConsumer(t *testing.T, topic string, dedup *middleware.Deduplicator, c *consumer) *gochannel.GoChannel {
	t.Helper()
	logger := watermill.NopLogger{}
	pubSub := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, logger)
	r, err := message.NewRouter(message.RouterConfig{}, logger)
	if err != nil {
		t.Fatal(err)
	}
	r.AddConsumerHandler("consumer", topic, pubSub, c.handle).AddMiddleware(dedup.Middleware)
	done := make(chan struct{})
	go func() { defer close(done); r.Run(context.Background()) }()
	t.Cleanup(func() { r.Close(); <-done; pubSub.Close() })
	<-r.Running()
	return pubSub
}

// lossyAck is a publisher that publishes and then, failNext times, reports
// a failure: the output went out but the aggregator does not know it.
type lossyAck struct {
	message.Publisher
	mu        sync.Mutex
	failNext  int
	published []string // UUIDs
}

func (p *lossyAck) Publish(topic string, msgs ...*message.Message) error {
	if err := p.Publisher.Publish(topic, msgs...); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range msgs {
		p.published = append(p.published, m.UUID)
	}
	if p.failNext > 0 {
		p.failNext--
		return testpub.ErrPublish
	}
	return nil
}

func uuidKey(m *message.Message) (string, error) { return m.UUID, nil }

func TestDeduplicatorKeyedByUUIDHandlesARepublishedReleaseOnce(t *testing.T) {
	c := &consumer{}
	out := runConsumer(t, "orders.aggregated", &middleware.Deduplicator{KeyFactory: uuidKey}, c)
	pub := &lossyAck{Publisher: out, failNext: 1}
	a, _ := newAgg(t, aggregator.Config{Publisher: pub, OutputTopic: "orders.aggregated", Release: aggregator.ReleaseOnCount(2)})
	handle(t, a, plain("o", "o1"))
	last := plain("o", "o2")
	if err := a.Handle(last); !errors.Is(err, testpub.ErrPublish) {
		t.Fatalf("Handle with a publish that reports failure = %v", err)
	}
	handle(t, a, last) // the redelivery publishes the release again
	if len(pub.published) != 2 || pub.published[0] != pub.published[1] {
		t.Fatalf("published %v, want one release twice with one UUID", pub.published)
	}
	if got := c.handled(); len(got) != 1 {
		t.Errorf("consumer handled %v, want the release once", got)
	}
}

func TestDeduplicatorWithItsDefaultKeyDropsAnotherReleaseWithTheSamePayload(t *testing.T) {
	c := &consumer{}
	out := runConsumer(t, "batches", &middleware.Deduplicator{}, c)
	pub := &lossyAck{Publisher: out}
	a, _ := newAgg(t, aggregator.Config{Publisher: pub, OutputTopic: "batches", Release: aggregator.ReleaseOnCount(1)})
	first, second := message.NewMessage("m1", []byte(`{"qty":1}`)), message.NewMessage("m2", []byte(`{"qty":1}`))
	first.Metadata.Set("correlation_id", "g1")
	second.Metadata.Set("correlation_id", "g2")
	handle(t, a, first, second)
	if len(pub.published) != 2 || pub.published[0] == pub.published[1] {
		t.Fatalf("published %v, want two releases with their own UUIDs", pub.published)
	}
	if got := c.handled(); len(got) != 1 {
		t.Errorf("consumer handled %v; want the second release dropped by the payload hash", got)
	}
}

func TestDeduplicatorDropsTheRedeliveryOfAFailedHandling(t *testing.T) {
	c := &consumer{failFirst: 1}
	out := runConsumer(t, "orders.aggregated", &middleware.Deduplicator{KeyFactory: uuidKey}, c)
	a, _ := newAgg(t, aggregator.Config{Publisher: out, OutputTopic: "orders.aggregated", Release: aggregator.ReleaseOnCount(1)})
	handle(t, a, plain("r", "r1")) // returns once the consumer acked the redelivery
	if got := c.handled(); len(got) != 1 {
		t.Errorf("consumer handled %v; want one failed call and the redelivery dropped", got)
	}
}

// alternate is a publisher that sends its n-th Publish to pubs[n%len(pubs)],
// as a queue with competing consumers may hand two copies to two of them.
type alternate struct {
	pubs []message.Publisher
	n    int
}

func (p *alternate) Publish(topic string, msgs ...*message.Message) error {
	pub := p.pubs[p.n%len(p.pubs)]
	p.n++
	return pub.Publish(topic, msgs...)
}

func (p *alternate) Close() error { return nil }

func TestDeduplicatorsOfTwoConsumerProcessesEachHandleARepublishedRelease(t *testing.T) {
	c1, c2 := &consumer{}, &consumer{}
	out1 := runConsumer(t, "orders.aggregated", &middleware.Deduplicator{KeyFactory: uuidKey}, c1)
	out2 := runConsumer(t, "orders.aggregated", &middleware.Deduplicator{KeyFactory: uuidKey}, c2)
	pub := &lossyAck{Publisher: &alternate{pubs: []message.Publisher{out1, out2}}, failNext: 1}
	a, _ := newAgg(t, aggregator.Config{Publisher: pub, OutputTopic: "orders.aggregated", Release: aggregator.ReleaseOnCount(1)})
	m := plain("p", "p1")
	if err := a.Handle(m); !errors.Is(err, testpub.ErrPublish) {
		t.Fatalf("Handle with a publish that reports failure = %v", err)
	}
	handle(t, a, m) // the redelivery publishes the release again, to the other consumer
	h1, h2 := c1.handled(), c2.handled()
	if len(h1) != 1 || len(h2) != 1 || h1[0] != h2[0] {
		t.Errorf("consumers handled %v and %v; want the one release by each", h1, h2)
	}
}

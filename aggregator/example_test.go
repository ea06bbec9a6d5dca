package aggregator_test

import (
	"context"
	"fmt"
	"strconv"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/lockreg/lockreg/aggregator"
)

// An aggregator on a router: the three lines of order 42, plain Watermill
// messages that carry only a correlation id, leave as one message once
// there are three of them. The input GoChannel delivers in publish order
// (BlockPublishUntilSubscriberAck), so the output lists them in that order.
func Example() {
	logger := watermill.NopLogger{}
	in := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, logger)
	out := gochannel.NewGoChannel(gochannel.Config{}, logger)
	router, _ := message.NewRouter(message.RouterConfig{}, logger)

	agg, err := aggregator.New(aggregator.Config{
		Publisher:   out,
		OutputTopic: "orders.aggregated",
		Release:     aggregator.ReleaseOnCount(3),
	})
	if err != nil {
		panic(err)
	}
	agg.AddHandler(router, "order-lines", "order.lines", in)

	orders, _ := out.Subscribe(context.Background(), "orders.aggregated")
	go router.Run(context.Background())
	<-router.Running()

	for n := 1; n <= 3; n++ {
		line := message.NewMessage(watermill.NewUUID(), []byte(`"line `+strconv.Itoa(n)+`"`))
		middleware.SetCorrelationID("order-42", line) // metadata "correlation_id"
		in.Publish("order.lines", line)
	}
	m := <-orders
	fmt.Println(m.Metadata.Get("correlation_id"), string(m.Payload))
	m.Ack()
	router.Close()
	out.Close() // ends the subscription of orders
	in.Close()
	// Output: order-42 ["line 1","line 2","line 3"]
}

// The default release strategy, ReleaseOnSequenceSize, is for messages that
// carry Spring-style sequence metadata: the three lines of order 42 arrive
// out of order and leave as one message, in sequence order.
func Example_sequenceSize() {
	logger := watermill.NopLogger{}
	pubSub := gochannel.NewGoChannel(gochannel.Config{}, logger)
	router, _ := message.NewRouter(message.RouterConfig{}, logger)

	agg, err := aggregator.New(aggregator.Config{Publisher: pubSub, OutputTopic: "orders.aggregated"})
	if err != nil {
		panic(err)
	}
	agg.AddHandler(router, "order-lines", "order.lines", pubSub)

	out, _ := pubSub.Subscribe(context.Background(), "orders.aggregated")
	go router.Run(context.Background())
	<-router.Running()

	for _, n := range []int{2, 3, 1} {
		line := message.NewMessage(watermill.NewUUID(), []byte(`"line `+strconv.Itoa(n)+`"`))
		line.Metadata.Set("correlation_id", "order-42")
		line.Metadata.Set("sequence_number", strconv.Itoa(n))
		line.Metadata.Set("sequence_size", "3")
		pubSub.Publish("order.lines", line)
	}
	m := <-out
	fmt.Println(m.Metadata.Get("correlation_id"), string(m.Payload))
	m.Ack()
	router.Close()
	pubSub.Close() // ends the subscription of out
	// Output: order-42 ["line 1","line 2","line 3"]
}

// Handle can be used without AddHandler; the timeout runner then runs under
// a context of the caller's.
func ExampleAggregator_Handle() {
	pub := gochannel.NewGoChannel(gochannel.Config{Persistent: true}, watermill.NopLogger{})
	defer pub.Close()
	agg, _ := aggregator.New(aggregator.Config{
		Publisher:   pub,
		OutputTopic: "batches",
		Release:     aggregator.ReleaseOnCount(2),
		Logger:      watermill.NopLogger{},
	})
	for i, body := range []string{`{"a":1}`, `{"b":2}`} {
		m := message.NewMessage(strconv.Itoa(i), []byte(body))
		m.Metadata.Set("correlation_id", "batch-1")
		if err := agg.Handle(m); err != nil {
			panic(err)
		}
	}
	batches, _ := pub.Subscribe(context.Background(), "batches")
	fmt.Println(string((<-batches).Payload))
	// Output: [{"a":1},{"b":2}]
}

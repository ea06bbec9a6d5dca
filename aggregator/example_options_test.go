package aggregator_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/lockreg/lockreg/aggregator"
	"github.com/lockreg/lockreg/groupstore"
	"github.com/lockreg/lockreg/sequence"
)

// GroupTimeoutFunc makes the timeout a function of the group, as Spring's
// groupTimeoutExpression: here a message flagged "flush" expires its group
// at once (a negative result), and the partial result leaves in Handle;
// any other message gives the group a minute more.
func Example_groupTimeoutFunc() {
	pub := gochannel.NewGoChannel(gochannel.Config{Persistent: true}, watermill.NopLogger{})
	defer pub.Close()
	agg, _ := aggregator.New(aggregator.Config{
		Publisher:                 pub,
		OutputTopic:               "batches",
		Release:                   aggregator.ReleaseOnCount(10),
		SendPartialResultOnExpiry: true,
		GroupTimeoutFunc: func(g groupstore.Group, latest *message.Message) time.Duration {
			if latest.Metadata.Get("flush") == "yes" {
				return -1 // expire now
			}
			return time.Minute
		},
		Logger: watermill.NopLogger{},
	})
	for i, body := range []string{`"a"`, `"b"`} {
		m := message.NewMessage(fmt.Sprint(i), []byte(body))
		m.Metadata.Set("correlation_id", "batch-1")
		if i == 1 {
			m.Metadata.Set("flush", "yes")
		}
		if err := agg.Handle(m); err != nil {
			panic(err)
		}
	}
	batches, _ := pub.Subscribe(context.Background(), "batches")
	fmt.Println(string((<-batches).Payload))
	// Output: ["a","b"]
}

// An aggregator after a nested split: the lines of each shipment are
// aggregated into a shipment that carries the order's sequence again
// (correlation_id order-7, sequence_number and sequence_size: Spring's
// popSequence), so that a second aggregator, which releases on that
// sequence, puts the order back together in sequence order.
func Example_nestedSplit() {
	pub := gochannel.NewGoChannel(gochannel.Config{Persistent: true}, watermill.NopLogger{})
	defer pub.Close()
	lines, _ := aggregator.New(aggregator.Config{Publisher: pub, OutputTopic: "shipments", LockPrefix: "lines:",
		Logger: watermill.NopLogger{}})
	shipments, _ := aggregator.New(aggregator.Config{Publisher: pub, OutputTopic: "orders", LockPrefix: "shipments:",
		Logger: watermill.NopLogger{}})

	order := message.NewMessage("order-7", nil)
	parts, _ := sequence.Split(order, []byte(`"s1"`), []byte(`"s2"`))
	for i, s := range parts {
		ls, _ := sequence.Split(s, []byte(fmt.Sprintf(`"s%d-a"`, i+1)), []byte(fmt.Sprintf(`"s%d-b"`, i+1)))
		for _, l := range ls {
			if err := lines.Handle(l); err != nil {
				panic(err)
			}
		}
	}
	out, _ := pub.Subscribe(context.Background(), "shipments")
	for range parts {
		s := <-out
		if err := shipments.Handle(s.Copy()); err != nil {
			panic(err)
		}
		s.Ack()
	}
	orders, _ := pub.Subscribe(context.Background(), "orders")
	o := <-orders
	fmt.Println(o.Metadata.Get("correlation_id"), string(o.Payload))
	// Output: order-7 [["s1-a","s1-b"],["s2-a","s2-b"]]
}

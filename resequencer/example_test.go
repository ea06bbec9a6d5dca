package resequencer_test

import (
	"context"
	"fmt"
	"strconv"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/lockreg/lockreg/resequencer"
)

// A resequencer on a router: the steps of account 7 arrive out of order and
// leave in order, each contiguous run as soon as it is complete. The output
// GoChannel blocks each Publish until the consumer acks, so that it keeps
// the order of publishes.
func Example() {
	logger := watermill.NopLogger{}
	in := gochannel.NewGoChannel(gochannel.Config{}, logger)
	out := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, logger)
	router, _ := message.NewRouter(message.RouterConfig{}, logger)

	rs, err := resequencer.New(resequencer.Config{
		Publisher:               out,
		OutputTopic:             "steps.ordered",
		ReleasePartialSequences: true,
	})
	if err != nil {
		panic(err)
	}
	rs.AddHandler(router, "resequence-steps", "steps", in)

	ordered, _ := out.Subscribe(context.Background(), "steps.ordered")
	go router.Run(context.Background())
	<-router.Running()

	for _, n := range []int{3, 1, 4, 2} {
		step := message.NewMessage(watermill.NewUUID(), []byte("step "+strconv.Itoa(n)))
		step.Metadata.Set("correlation_id", "account-7")
		step.Metadata.Set("sequence_number", strconv.Itoa(n))
		step.Metadata.Set("sequence_size", "4")
		in.Publish("steps", step)
	}
	for range 4 {
		m := <-ordered
		fmt.Println(string(m.Payload))
		m.Ack()
	}
	router.Close()
	out.Close()
	// Output:
	// step 1
	// step 2
	// step 3
	// step 4
}

// printer is a publisher that prints what it is given.
type printer struct{}

func (printer) Publish(topic string, msgs ...*message.Message) error {
	for _, m := range msgs {
		if reason := m.Metadata.Get(resequencer.DiscardReasonKey); reason != "" {
			fmt.Println(topic, string(m.Payload), reason)
		} else {
			fmt.Println(topic, string(m.Payload))
		}
	}
	return nil
}

func (printer) Close() error { return nil }

// Handle can be used without AddHandler (the timeout runner then needs
// RunTimeouts). The whole sequence is released once it is there; a late
// message goes to the discard topic with its reason.
func ExampleResequencer_Handle() {
	rs, _ := resequencer.New(resequencer.Config{
		Publisher:    printer{},
		OutputTopic:  "ordered",
		DiscardTopic: "discarded",
		Logger:       watermill.NopLogger{},
	})
	for i, n := range []string{"2", "1", "2", "x"} {
		m := message.NewMessage("m"+strconv.Itoa(i), []byte("#"+n))
		m.Metadata.Set("correlation_id", "batch-1")
		m.Metadata.Set("sequence_number", n)
		m.Metadata.Set("sequence_size", "2")
		if err := rs.Handle(m); err != nil {
			panic(err)
		}
	}
	// Output:
	// ordered #1
	// ordered #2
	// discarded #2 late
	// discarded #x invalid: sequence_number "x" is not a number
}

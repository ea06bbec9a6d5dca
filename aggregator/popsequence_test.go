package aggregator_test

import (
	"errors"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/lockreg/lockreg/aggregator"
	"github.com/lockreg/lockreg/groupstore"
	"github.com/lockreg/lockreg/sequence"
)

// splitOrder splits an order into shipments and each shipment into lines,
// and returns the lines.
func splitOrder(t *testing.T, order *message.Message, lines ...[]string) []*message.Message {
	t.Helper()
	payloads := make([]message.Payload, len(lines))
	for i := range lines {
		payloads[i] = []byte(`"shipment"`)
	}
	shipments, err := sequence.Split(order, payloads...)
	if err != nil {
		t.Fatal(err)
	}
	var out []*message.Message
	for i, s := range shipments {
		var ps []message.Payload
		for _, l := range lines[i] {
			ps = append(ps, []byte(`"`+l+`"`))
		}
		ls, err := sequence.Split(s, ps...)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ls...)
	}
	return out
}

func TestNestedSplitIsAggregatedBackLevelByLevel(t *testing.T) {
	forEachStore(t, func(t *testing.T, store groupstore.Store) {
		order := message.NewMessage("order-7", []byte(`"order"`))
		order.Metadata.Set("correlation_id", "batch-1") // the order is itself part 2 of 2 of a batch
		order.Metadata.Set("sequence_number", "2")
		order.Metadata.Set("sequence_size", "2")
		lines := splitOrder(t, order, []string{"a", "b"}, []string{"c", "d", "e"})

		inner, shipments := newAgg(t, aggregator.Config{Store: store, LockPrefix: "lines:"})
		for i := len(lines) - 1; i >= 0; i-- {
			handle(t, inner, lines[i])
		}
		outs := shipments.On("out")
		if len(outs) != 2 {
			t.Fatalf("%d shipment outputs, want 2", len(outs))
		}
		for _, o := range outs {
			md := o.Metadata
			if md.Get("correlation_id") != "order-7" || md.Get("sequence_size") != "2" || md.Get(sequence.DetailsKey) == "" {
				t.Errorf("shipment output metadata %v: want the order's sequence, the batch still stacked", md)
			}
		}

		outer, orders := newAgg(t, aggregator.Config{Store: store, LockPrefix: "shipments:"})
		// Copies, as a subscriber delivers them: the published ones carry
		// the context of the release, which ended with it.
		handle(t, outer, outs[1].Copy(), outs[0].Copy())
		got := orders.On("out")
		if len(got) != 1 {
			t.Fatalf("%d order outputs, want 1", len(got))
		}
		if p := string(got[0].Payload); p != `[["a","b"],["c","d","e"]]` {
			t.Errorf("order payload %s", p)
		}
		md := got[0].Metadata
		if md.Get("correlation_id") != "batch-1" || md.Get("sequence_number") != "2" || md.Get("sequence_size") != "2" {
			t.Errorf("order output metadata %v, want part 2 of 2 of batch-1", md)
		}
		if _, ok := md[sequence.DetailsKey]; ok {
			t.Errorf("order output keeps the stack %q", md[sequence.DetailsKey])
		}
	})
}

func TestDisablePopSequenceKeepsTheInnerSequence(t *testing.T) {
	lines := splitOrder(t, message.NewMessage("order-7", nil), []string{"a"})
	a, rec := newAgg(t, aggregator.Config{DisablePopSequence: true})
	handle(t, a, lines...)
	md := rec.On("out")[0].Metadata
	if md.Get("correlation_id") == "order-7" || md.Get(sequence.DetailsKey) == "" {
		t.Errorf("output metadata %v, want the shipment's correlation and the stack", md)
	}
}

func TestOutputThatChangedTheStackIsNotPopped(t *testing.T) {
	lines := splitOrder(t, message.NewMessage("order-7", nil), []string{"a"})
	a, rec := newAgg(t, aggregator.Config{Output: func(g aggregator.Group) (*message.Message, error) {
		out := message.NewMessage("", []byte("own"))
		out.Metadata.Set("correlation_id", "mine")
		out.Metadata.Set(sequence.DetailsKey, "[]")
		return out, nil
	}})
	handle(t, a, lines...)
	if md := rec.On("out")[0].Metadata; md.Get("correlation_id") != "mine" {
		t.Errorf("output metadata %v, want Output's", md)
	}
}

func TestInvalidSequenceDetailsFailTheRelease(t *testing.T) {
	m := part("bad", 1, 1)
	m.Metadata.Set(sequence.DetailsKey, "{")
	a, rec := newAgg(t, aggregator.Config{})
	if err := a.Handle(m); !errors.Is(err, sequence.ErrInvalidDetails) {
		t.Errorf("Handle: %v, want ErrInvalidDetails", err)
	}
	if len(rec.On("out")) != 0 {
		t.Error("released with invalid details")
	}
}

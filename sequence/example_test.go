package sequence_test

import (
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/lockreg/lockreg/sequence"
)

// A part of a part carries its parent's sequence on the stack; Pop, which
// the aggregator applies to its output, brings it back.
func Example() {
	order := message.NewMessage("order-7", nil)
	shipments, _ := sequence.Split(order, []byte("s1"), []byte("s2"))
	lines, _ := sequence.Split(shipments[1], []byte("l1"), []byte("l2"), []byte("l3"))

	line := lines[2].Metadata
	fmt.Println(line.Get(sequence.NumberKey), "of", line.Get(sequence.SizeKey))
	fmt.Println(line.Get(sequence.DetailsKey))

	_ = sequence.Pop(line) // what an aggregator of the lines does to its output
	fmt.Println(line.Get(sequence.CorrelationIDKey), line.Get(sequence.NumberKey), "of", line.Get(sequence.SizeKey))
	// Output:
	// 3 of 3
	// [{"correlation_id":"order-7","sequence_number":"2","sequence_size":"2"}]
	// order-7 2 of 2
}

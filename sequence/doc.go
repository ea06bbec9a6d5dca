// Package sequence reads and writes the sequence metadata of split
// messages: the Watermill form of Spring Integration's correlationId,
// sequenceNumber, sequenceSize and sequenceDetails headers, so that a
// split message can be split again and each aggregator restores the
// sequence of the level above on its output (Spring's popSequence).
//
// # Metadata
//
// A part of a split carries CorrelationIDKey (the UUID of the message that
// was split), NumberKey (its 1-based position, decimal) and SizeKey (the
// number of parts, decimal). When the message that was split was itself a
// part, it had those keys too: [Push] saves them, as a frame, on a stack
// under DetailsKey before it overwrites them. The stack is a JSON array,
// outermost frame first; a frame is an object with the keys
// "correlation_id", "sequence_number" and "sequence_size", each present
// when the split message had that key, with its value as a string:
//
//	sequence_details: [{"correlation_id":"order-7","sequence_number":"2","sequence_size":"3"}]
//
// A message with no correlation id pushes nothing, as in Spring, so the
// parts of a top-level split carry no DetailsKey. [Pop] restores the
// innermost frame (keys the frame lacks are deleted) and removes it from
// the stack, deleting DetailsKey when it empties. aggregator.Aggregator
// pops the output of a release whose stack is still that of the group's
// messages, unless told not to (aggregator.Config.DisablePopSequence).
//
// [Split] is a splitter built on Push: it makes the parts of a message,
// copying its metadata, with name-based UUIDs, so that a redelivered
// message splits into parts with the same UUIDs and an aggregator
// recognises them as redeliveries.
package sequence

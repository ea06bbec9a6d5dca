// Package groupcommit runs the calls that arrive while a statement is in
// flight together, in one statement of their own (a group commit): one
// round trip, one commit and one flush of the log for all of them. A call
// that finds the statement free runs at once, with whatever waits, so that
// a quiet client adds no latency; when a statement ends, the first call
// waiting runs the next one, so that no caller does another's work after
// its own.
package groupcommit

import (
	"context"
	"slices"
	"sync"
)

// A Call is one call of a Batcher; Item carries its input and, once Do
// returns nil, its result.
type Call[T any] struct {
	Ctx  context.Context
	Item T

	done chan struct{} // closed once the result is set, or lead
	lead []*Call[T]    // set before done closes when the call is to run this batch (itself in it)
}

// A Batcher runs calls in batches. Its fields are set before its first
// call and not changed after.
type Batcher[T any] struct {
	// Max is how many statements run at once at most; 1 or more.
	Max int
	// MaxBatch bounds the calls of one statement; 1 or more.
	MaxBatch int
	// Apart, if not nil, reports whether two items must not share a
	// statement; a call kept apart waits for a later one, in its order.
	Apart func(a, b T) bool
	// Exec runs batch, one call or more, and sets each call's result in
	// its Item.
	Exec func(batch []*Call[T])

	mu      sync.Mutex
	running int
	queue   []*Call[T]
}

// Do runs c, alone or with others, and returns once its result is set. It
// returns c.Ctx's error, without having run c, when c.Ctx ends while c
// waits for a statement; once a statement holds c, Do waits for its
// outcome.
func (b *Batcher[T]) Do(c *Call[T]) error {
	b.mu.Lock()
	if b.running < b.Max {
		b.running++
		batch := b.take(c)
		b.mu.Unlock()
		b.run(batch)
		return nil
	}
	c.done = make(chan struct{})
	b.queue = append(b.queue, c)
	b.mu.Unlock()
	select {
	case <-c.done:
	case <-c.Ctx.Done():
		b.mu.Lock()
		i := slices.Index(b.queue, c)
		if i >= 0 {
			b.queue = slices.Delete(b.queue, i, i+1)
		}
		b.mu.Unlock()
		if i >= 0 {
			return c.Ctx.Err()
		}
		<-c.done // a batch holds it: its outcome is coming
	}
	if c.lead != nil {
		b.run(c.lead)
	}
	return nil
}

// take takes waiting calls, up to MaxBatch with first, which leads them
// (nil: the first taken does); b.mu is held.
func (b *Batcher[T]) take(first *Call[T]) []*Call[T] {
	batch := make([]*Call[T], 0, min(len(b.queue)+1, b.MaxBatch))
	if first != nil {
		batch = append(batch, first)
	}
	kept := b.queue[:0]
	for _, c := range b.queue {
		if len(batch) == b.MaxBatch || b.Apart != nil && slices.ContainsFunc(batch, func(o *Call[T]) bool { return b.Apart(o.Item, c.Item) }) {
			kept = append(kept, c)
			continue
		}
		batch = append(batch, c)
	}
	clear(b.queue[len(kept):])
	b.queue = kept
	return batch
}

// run runs batch, wakes its calls but the caller's own, and hands the
// next batch, if any waits, to its first call.
func (b *Batcher[T]) run(batch []*Call[T]) {
	b.Exec(batch)
	b.mu.Lock()
	var next []*Call[T]
	if len(b.queue) > 0 {
		next = b.take(nil)
	} else {
		b.running--
	}
	b.mu.Unlock()
	for _, c := range batch {
		if c.done != nil && c.lead == nil { // it waits; a lead's done is closed
			close(c.done)
		}
	}
	if len(next) > 0 {
		next[0].lead = next
		close(next[0].done)
	}
}

// Waiting returns how many calls wait for a statement.
func (b *Batcher[T]) Waiting() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.queue)
}

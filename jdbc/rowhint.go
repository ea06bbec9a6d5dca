package jdbc

import "time"

// rowHints is what a repository last learned of the rows of the keys it
// acquired, so that an acquisition sends the cheaper statement that fits,
// as ShedLock's LockRecordRegistry does: on PostgreSQL the take statement
// (an UPDATE) for a row known to exist and not found held lately, the
// upsert for a key it has not seen and for one that another client held
// lately (the UPDATE would affect no row there, and the upsert would follow
// it: two round trips). Either statement alone decides correctly; a wrong
// hint costs a round trip, never a wrong answer. It is guarded by the
// repository's mu.
type rowHints struct {
	// heldUntil maps a normalized LOCK_KEY to the time until which an
	// acquisition skips the take statement; the zero time when the row
	// exists and may be taken at once.
	heldUntil map[string]time.Time
	// calm is how long a key counts as contended after an acquisition
	// found it held: while this client may still have a place in the
	// key's queue (WithQueueTTL), which only the upsert's queue form
	// leaves, and at least a second.
	calm time.Duration
}

// maxRowHints bounds the keys remembered; beyond it they are forgotten all
// at once, which costs each key one upsert instead of a take.
const maxRowHints = 8192

func newRowHints(queueTTL time.Duration) rowHints {
	return rowHints{heldUntil: make(map[string]time.Time), calm: max(time.Second, queueTTL)}
}

// take reports whether an acquisition of hk should try the take statement
// first.
func (h *rowHints) take(hk string, now time.Time) bool {
	until, ok := h.heldUntil[hk]
	return ok && !now.Before(until)
}

// learn records the outcome of a statement that took the lease of hk
// (acquired) or found it held by another client.
func (h *rowHints) learn(hk string, acquired bool, now time.Time) {
	until, ok := h.heldUntil[hk]
	switch {
	case !acquired:
		until = now.Add(h.calm)
	case ok:
		return // taken: a contended key stays so until it calms down
	}
	if !ok && len(h.heldUntil) >= maxRowHints {
		clear(h.heldUntil)
	}
	h.heldUntil[hk] = until
}

package sqlstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/lockreg/lockreg/groupstore"
)

// maxBatch bounds the Adds of one group commit: its transaction holds
// the row locks of all their groups until it commits.
const maxBatch = 32

// A batcher runs the one-statement Adds of a store (PostgreSQL's, outside
// Locked) that arrive while Config.GroupCommit statements are in flight
// together, in one AddBatch statement of their own (a group commit): one
// round trip, one commit and one flush of the log for all of them. An Add that finds a transaction free runs at once, with
// whatever waits, so that a quiet store adds no latency; when a
// statement ends, the first Add waiting runs the next one, so that no
// caller does another's work after its own.
type batcher struct {
	s   *Store
	max int // transactions in flight at most

	mu      sync.Mutex
	running int
	queue   []*addCall
}

// An addCall is one Add in a batcher.
type addCall struct {
	ctx     context.Context
	key     string
	v       *values
	timeout time.Duration

	done chan struct{} // closed once the result is set, or lead
	lead []*addCall    // set before done closes when the call is to run this batch (itself in it)

	g       groupstore.Group
	outcome groupstore.Outcome
	fits    bool
	err     error
}

// errAlone marks the calls of a group commit that failed: each runs again
// on its own, so that one call's error is its own.
var errAlone = errors.New("run alone")

// add runs c, alone or in a group commit, and sets its result.
func (b *batcher) add(c *addCall) {
	b.mu.Lock()
	if b.running < b.max {
		b.running++
		batch := b.take(c)
		b.mu.Unlock()
		b.run(batch)
	} else {
		c.done = make(chan struct{})
		b.queue = append(b.queue, c)
		b.mu.Unlock()
		select {
		case <-c.done:
		case <-c.ctx.Done():
			b.mu.Lock()
			i := slices.Index(b.queue, c)
			if i >= 0 {
				b.queue = slices.Delete(b.queue, i, i+1)
			}
			b.mu.Unlock()
			if i >= 0 {
				c.err = c.ctx.Err()
				return
			}
			<-c.done // a batch holds it: its outcome is coming
		}
		if c.lead != nil {
			b.run(c.lead)
		}
	}
	if errors.Is(c.err, errAlone) {
		b.alone(c)
	}
}

// alone runs c as a statement of its own, again after a transient error.
func (b *batcher) alone(c *addCall) {
	c.err = b.s.retry(c.ctx, func() (err error) {
		c.g, c.outcome, c.fits, err = b.s.addOne(c.ctx, b.s.db, c.key, c.v, c.timeout)
		return err
	})
}

// take takes waiting calls of distinct groups, up to maxBatch with
// first, which leads them (nil: the first taken does); b.mu is held. The
// others wait for a later batch, in their order: one statement adds at
// most one message to a group.
func (b *batcher) take(first *addCall) []*addCall {
	batch := make([]*addCall, 0, min(len(b.queue)+1, maxBatch))
	if first != nil {
		batch = append(batch, first)
	}
	kept := b.queue[:0]
	for _, c := range b.queue {
		if len(batch) == maxBatch || slices.ContainsFunc(batch, func(o *addCall) bool { return o.v.groupKey == c.v.groupKey }) {
			kept = append(kept, c)
			continue
		}
		batch = append(batch, c)
	}
	clear(b.queue[len(kept):])
	b.queue = kept
	return batch
}

// run runs batch, sets the results of its calls and wakes them but the
// caller's own, and hands the next batch, if any waits, to its first call.
func (b *batcher) run(batch []*addCall) {
	b.exec(batch)
	b.mu.Lock()
	var next []*addCall
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

// exec runs batch: one call as AddMessage, more as one AddBatch
// statement. On an error of the statement every call is marked errAlone.
func (b *batcher) exec(batch []*addCall) {
	s := b.s
	if len(batch) == 1 {
		b.alone(batch[0])
		return
	}
	rows := make([]batchRow, len(batch))
	probe := 0
	for i, c := range batch {
		v := c.v
		rows[i] = batchRow{N: i, GroupKey: v.groupKey, CorrelationKey: v.correlationKey, GroupID: v.groupID,
			MessageKey: v.messageKey, MessageID: v.messageID, Metadata: v.metadata, Payload: v.payload,
			Due: c.timeout > 0, Timeout: v.timeout}
		if p := v.probe; p != nil {
			probe = 1
			rows[i].UniqueKey, rows[i].Unique, rows[i].SameKey, rows[i].Same = p.UniqueKey, p.Unique, p.SameKey, p.Same
		}
	}
	js, err := json.Marshal(rows)
	if err != nil {
		for _, c := range batch {
			c.err = errAlone
		}
		return
	}
	v := &values{region: s.region, rows: string(js)} // the statement's only other parameter
	q := s.sql.addBatch[probe]
	// The statement must not end with its first caller's context: the
	// others wait for it too.
	ctx := context.WithoutCancel(batch[0].ctx)
	type result struct {
		row         groupRow
		added, fits int64
		ok          bool
	}
	res := make([]result, len(batch))
	err = s.retry(ctx, func() error {
		clear(res)
		rs, err := s.db.QueryContext(ctx, q.SQL, v.args(q)...)
		if err != nil {
			return err
		}
		defer rs.Close()
		for rs.Next() {
			var r result
			var n int
			dest := append([]any{&n}, r.row.dest()...)
			dest = append(dest, &r.added)
			if probe == 1 {
				dest = append(dest, &r.fits)
			}
			if err := rs.Scan(dest...); err != nil {
				return err
			}
			if n < 0 || n >= len(res) {
				return fmt.Errorf("sqlstore: a batched add returned row %d of %d", n, len(res))
			}
			r.ok = true
			res[n] = r
		}
		return rs.Err()
	})
	for i, c := range batch {
		r := &res[i]
		if err != nil || !r.ok {
			c.err = errAlone
			continue
		}
		c.g, c.outcome, c.fits, c.err = s.added(c.ctx, s.db, c.key, c.v, &r.row, r.added, r.fits)
	}
}

// batchRow is one message of an AddBatch statement's :rows.
type batchRow struct {
	N              int    `json:"n"`
	GroupKey       string `json:"group_key"`
	CorrelationKey string `json:"correlation_key"`
	GroupID        string `json:"group_id"`
	MessageKey     string `json:"message_key"`
	MessageID      string `json:"message_id"`
	Metadata       any    `json:"metadata"` // JSON text or nil
	Payload        []byte `json:"payload"`  // base64
	Due            bool   `json:"due"`
	Timeout        int64  `json:"timeout"`
	UniqueKey      string `json:"unique_key"`
	Unique         int64  `json:"unique"`
	SameKey        string `json:"same_key"`
	Same           int64  `json:"same"`
}

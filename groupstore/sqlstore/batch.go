package sqlstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/lockreg/lockreg/groupstore"
	"github.com/lockreg/lockreg/internal/dialect"
	"github.com/lockreg/lockreg/internal/groupcommit"
)

// maxBatch bounds the Adds of one group commit: its transaction holds
// the row locks of all their groups until it commits.
const maxBatch = 32

// A batcher runs the one-statement Adds of a store (PostgreSQL's, outside
// Locked) that arrive while Config.GroupCommit statements are in flight
// together, in one AddBatch statement of their own (a group commit, see
// package groupcommit): one round trip, one commit and one flush of the log
// for all of them. One statement adds at most one message to a group.
type batcher struct {
	s *Store
	b groupcommit.Batcher[*addCall]
}

func newBatcher(s *Store, inFlight int) *batcher {
	b := &batcher{s: s}
	b.b = groupcommit.Batcher[*addCall]{Max: inFlight, MaxBatch: maxBatch, Exec: b.exec,
		Apart: func(x, y *addCall) bool { return x.v.groupKey == y.v.groupKey }}
	return b
}

// An addCall is one Add in a batcher.
type addCall struct {
	ctx     context.Context
	key     string
	v       *values
	timeout time.Duration

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
	if err := b.b.Do(&groupcommit.Call[*addCall]{Ctx: c.ctx, Item: c}); err != nil {
		c.err = err
		return
	}
	if errors.Is(c.err, errAlone) {
		b.alone(c)
	}
}

// alone runs c as a statement of its own, again after a transient error.
func (b *batcher) alone(c *addCall) {
	c.err = b.s.retry(c.ctx, func() (err error) {
		c.g, c.outcome, c.fits, err = b.s.addOne(c.ctx, b.s.db, true, c.key, c.v, c.timeout)
		return err
	})
}

// exec runs batch: one call as AddMessage, more as one AddBatch
// statement. On an error of the statement every call is marked errAlone.
func (b *batcher) exec(calls []*groupcommit.Call[*addCall]) {
	s := b.s
	batch := make([]*addCall, len(calls))
	for i, c := range calls {
		batch[i] = c.Item
	}
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
			rows[i].ProbeKeys = v.probeKeys
		}
	}
	variant := probe
	if probe == 1 && !s.noSummary.Load() {
		variant = 2 // the summaries too
	}
	js, err := json.Marshal(rows)
	if err != nil {
		for _, c := range batch {
			c.err = errAlone
		}
		return
	}
	v := &values{region: s.region, rows: string(js)} // the statement's only other parameter
	q := s.sql.addBatch[variant]
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
	if variant == 2 && dialect.IsUndefinedColumn(err) { // a table without script 000008's columns
		s.noSummary.Store(true)
	}
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
	ProbeKeys      string `json:"probe_keys,omitempty"`
}

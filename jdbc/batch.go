package jdbc

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/lockreg/lockreg/internal/dialect"
	"github.com/lockreg/lockreg/internal/groupcommit"
	"github.com/lockreg/lockreg/registry"
)

// maxGroup bounds the keys of one group commit: its transaction holds the
// locks of their rows until it commits.
const maxGroup = 32

// A rowCall is the take or the expiry of one key's row in a group commit
// (see WithGroupCommit).
type rowCall struct {
	key, lk, hk string        // the caller's key, its LOCK_KEY, and the held-set key
	ttl         time.Duration // a take's lease length

	lease registry.Lease // a take's
	done  bool           // the statement took, or expired, the row
	err   error
}

// groupRow is one key of a TakeBatch or ExpireBatch statement's :rows.
type groupRow struct {
	N    int    `json:"n"`
	K    string `json:"k"`
	TTL  int64  `json:"ttl,omitempty"`
	Name string `json:"name,omitempty"`
}

// startGroupCommits sets up the group commits of takes and expiries, where
// the dialect batches them and inFlight is positive.
func (r *LockRepository) startGroupCommits(statements *lockStatements, inFlight int, unprepared bool) {
	if inFlight <= 0 {
		return
	}
	apart := func(a, b *rowCall) bool { return a.hk == b.hk }
	if r.take != nil && statements.takeBatch.SQL != "" {
		r.takeBatch = &stmt{q: statements.takeBatch, unprepared: unprepared, tel: r.cfg.tel.stmt("acquire")}
		r.takes = &groupcommit.Batcher[*rowCall]{Max: inFlight, MaxBatch: maxGroup, Apart: apart, Exec: r.execTakes}
	}
	if r.expire != nil && statements.expireBatch.SQL != "" {
		r.expireBatch = &stmt{q: statements.expireBatch, unprepared: unprepared, tel: r.cfg.tel.stmt("release")}
		r.expiries = &groupcommit.Batcher[*rowCall]{Max: inFlight, MaxBatch: maxGroup, Apart: apart, Exec: r.execExpiries}
	}
}

// takeRow runs the take statement for key, alone or in a group commit.
func (r *LockRepository) takeRow(ctx context.Context, key, lk, hk string, ttl time.Duration) (registry.Lease, bool, error) {
	if r.takes == nil {
		return r.doAcquire(ctx, r.take, key, lk, ttl)
	}
	c := &groupcommit.Call[*rowCall]{Ctx: ctx, Item: &rowCall{key: key, lk: lk, hk: hk, ttl: ttl}}
	if err := r.takes.Do(c); err != nil {
		return registry.Lease{}, false, err
	}
	return c.Item.lease, c.Item.done, c.Item.err
}

// expireRow runs the expire statement for the row lk, alone or in a group
// commit, and reports whether it expired the row.
func (r *LockRepository) expireRow(ctx context.Context, lk, hk string) (bool, error) {
	if r.expiries == nil {
		return r.expireOne(ctx, lk)
	}
	c := &groupcommit.Call[*rowCall]{Ctx: ctx, Item: &rowCall{lk: lk, hk: hk}}
	if err := r.expiries.Do(c); err != nil {
		return false, err
	}
	return c.Item.done, c.Item.err
}

func (r *LockRepository) expireOne(ctx context.Context, lk string) (bool, error) {
	res, err := r.expire.exec(ctx, r.db, r.params(lk, 0).args(r.expire.q))
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n > 0, err
}

func (r *LockRepository) execTakes(batch []*groupcommit.Call[*rowCall]) {
	if len(batch) == 1 {
		c := batch[0].Item
		c.lease, c.done, c.err = r.doAcquire(batch[0].Ctx, r.take, c.key, c.lk, c.ttl)
		return
	}
	rows := make([]groupRow, len(batch))
	for i, c := range batch {
		rows[i] = groupRow{N: i, K: c.Item.lk, TTL: dialect.Micros(c.Item.ttl), Name: dialect.Readable(c.Item.key)}
	}
	r.execGroup(batch, r.takeBatch, rows, true)
}

func (r *LockRepository) execExpiries(batch []*groupcommit.Call[*rowCall]) {
	if len(batch) == 1 {
		c := batch[0].Item
		c.done, c.err = r.expireOne(batch[0].Ctx, c.lk)
		return
	}
	rows := make([]groupRow, len(batch))
	for i, c := range batch {
		rows[i] = groupRow{N: i, K: c.Item.lk}
	}
	r.execGroup(batch, r.expireBatch, rows, false)
}

// execGroup runs st, a TakeBatch or ExpireBatch statement (withToken: it
// returns tokens too), for the keys of batch, and marks done the calls
// whose n it returns. A call the statement leaves, and every call when it
// fails, is not done, without an error: its caller runs the statements of
// one key, which decide (and find a row that a failed statement took or
// expired before its reply was lost as this client's).
func (r *LockRepository) execGroup(batch []*groupcommit.Call[*rowCall], st *stmt, rows []groupRow, withToken bool) {
	js, err := json.Marshal(rows)
	if err != nil {
		return
	}
	p := r.params("", 0)
	p.rows, p.holder = string(js), r.cfg.holder
	ctx, cancel := groupContext(batch)
	defer cancel()
	err = st.query(ctx, r.db, p.args(st.q), func(rs *sql.Rows) error {
		var (
			n     int
			token int64
		)
		dest := []any{&n}
		if withToken {
			dest = append(dest, &token)
		}
		if err := rs.Scan(dest...); err != nil {
			return err
		}
		if n < 0 || n >= len(batch) {
			return fmt.Errorf("jdbc: a group commit returned key %d of %d", n, len(batch))
		}
		c := batch[n].Item
		c.done, c.lease.Token = true, token
		return nil
	})
	if err != nil {
		for _, c := range batch {
			c.Item.done, c.Item.lease = false, registry.Lease{}
		}
	}
}

// groupContext returns the context of a group commit's statement: the
// first call's values, no cancellation (the others wait for it too), and
// the latest deadline of the calls, if all have one.
func groupContext(batch []*groupcommit.Call[*rowCall]) (context.Context, context.CancelFunc) {
	ctx := context.WithoutCancel(batch[0].Ctx)
	var latest time.Time
	for _, c := range batch {
		d, ok := c.Ctx.Deadline()
		if !ok {
			return ctx, func() {}
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(ctx, latest)
}

package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/lockreg/lockreg/groupstore"
	"github.com/lockreg/lockreg/internal/dialect"
)

// The operator's view of the group tables: Groups lists the store's groups,
// Inspect shows one with its messages, Expire makes one due, and Remove with
// version 0 deletes one. They are what the lockreg command's "groups"
// commands call.

// GroupState selects groups by state in a GroupFilter.
type GroupState int

const (
	AnyGroup       GroupState = iota // every group
	OpenGroups                       // not complete
	CompleteGroups                   // complete (released), kept until the clean-up deletes them
	DueGroups                        // due: their timeout (or scheduled removal) has come, by the database's clock
)

// GroupFilter selects the groups Store.Groups lists. The zero value lists
// every group of the store's region.
type GroupFilter struct {
	State     GroupState    // Optional: AnyGroup by default
	OlderThan time.Duration // Optional: only groups created more than this long ago
	Limit     int           // Optional: at most this many groups (0: no limit)
}

// GroupInfo is one row of the group table.
type GroupInfo struct {
	Key                  string // the correlation key
	ID                   string
	Complete             bool
	Size                 int   // unreleased messages
	Releases             int64 // how many times messages were released
	LastReleasedSequence int64
	Version              int64
	Created, Updated     time.Time // UTC
	Due                  time.Time // UTC; zero without a timeout
	ClaimedUntil         time.Time // UTC; zero unless a timeout runner claimed it
}

// MessageInfo is one message row of a group, released or not.
type MessageInfo struct {
	UUID        string
	Position    int64
	Released    bool // released messages keep their row, without payload, to recognise redeliveries
	PayloadSize int64
	Created     time.Time // UTC
}

func (s *Store) groupSelect() string {
	d := s.d
	return `SELECT CORRELATION_KEY, GROUP_ID, COMPLETE, MESSAGE_COUNT, RELEASES, LAST_RELEASED_SEQUENCE, VERSION, ` +
		d.Micros(`CREATED_DATE`) + `, ` + d.Micros(`UPDATED_DATE`) + `, ` + d.Micros(`DUE_AT`) + `, ` +
		d.Micros(`CLAIMED_UNTIL`) + ` FROM {prefix}GROUP WHERE REGION = :region`
}

// Groups lists the groups of the store's region that f selects, oldest
// first. It is one SELECT, which scans the region's groups.
func (s *Store) Groups(ctx context.Context, f GroupFilter) ([]GroupInfo, error) {
	q := s.groupSelect()
	switch f.State {
	case OpenGroups:
		q += ` AND COMPLETE = 0`
	case CompleteGroups:
		q += ` AND COMPLETE = 1`
	case DueGroups:
		q += ` AND DUE_AT <= {now}`
	}
	if f.OlderThan > 0 {
		q += ` AND CREATED_DATE < {now-:lease}`
	}
	q += ` ORDER BY CREATED_DATE, CORRELATION_KEY`
	if f.Limit > 0 {
		q += ` LIMIT :limit`
	}
	v := &values{region: s.region, lease: dialect.Micros(f.OlderThan), limit: f.Limit}
	return s.queryGroups(ctx, "sqlstore: groups", q, v)
}

func (s *Store) queryGroups(ctx context.Context, what, q string, v *values) ([]GroupInfo, error) {
	cq, err := s.d.Compile(q, s.prefix(), dialect.GroupParams...)
	if err != nil {
		return nil, err
	}
	rows, err := s.db.QueryContext(ctx, cq.SQL, v.args(cq)...)
	if err != nil {
		return nil, s.wrap(ctx, what, err)
	}
	defer rows.Close()
	var out []GroupInfo
	for rows.Next() {
		var g GroupInfo
		var complete, size, created, updated int64
		var due, claimed sql.NullInt64
		if err := rows.Scan(&g.Key, &g.ID, &complete, &size, &g.Releases, &g.LastReleasedSequence, &g.Version,
			&created, &updated, &due, &claimed); err != nil {
			return nil, s.wrap(ctx, what, err)
		}
		g.ID, g.Complete, g.Size = strings.TrimSpace(g.ID), complete != 0, int(size)
		g.Created, g.Updated = time.UnixMicro(created).UTC(), time.UnixMicro(updated).UTC()
		if due.Valid {
			g.Due = time.UnixMicro(due.Int64).UTC()
		}
		if claimed.Valid {
			g.ClaimedUntil = time.UnixMicro(claimed.Int64).UTC()
		}
		out = append(out, g)
	}
	if err := rows.Err(); err != nil {
		return nil, s.wrap(ctx, what, err)
	}
	return out, nil
}

// Inspect returns the group of key and its messages, released ones
// included, in position order. It fails with an error wrapping
// groupstore.ErrNotFound when there is no such group. It is two SELECTs.
func (s *Store) Inspect(ctx context.Context, key string) (GroupInfo, []MessageInfo, error) {
	what := "sqlstore: inspect " + dialect.Quote(key)
	v := s.values(key)
	gs, err := s.queryGroups(ctx, what, s.groupSelect()+` AND GROUP_KEY = :group_key`, v)
	if err != nil {
		return GroupInfo{}, nil, err
	}
	if len(gs) == 0 {
		return GroupInfo{}, nil, fmt.Errorf("%s: %w", what, groupstore.ErrNotFound)
	}
	cq, err := s.d.Compile(`SELECT MESSAGE_ID, POSITION, RELEASED, COALESCE(LENGTH(PAYLOAD), 0), `+s.d.Micros(`CREATED_DATE`)+
		` FROM {prefix}GROUP_MESSAGE WHERE GROUP_KEY = :group_key AND REGION = :region ORDER BY POSITION`, s.prefix(), dialect.GroupParams...)
	if err != nil {
		return GroupInfo{}, nil, err
	}
	rows, err := s.db.QueryContext(ctx, cq.SQL, v.args(cq)...)
	if err != nil {
		return GroupInfo{}, nil, s.wrap(ctx, what, err)
	}
	defer rows.Close()
	var msgs []MessageInfo
	for rows.Next() {
		var m MessageInfo
		var released, created int64
		if err := rows.Scan(&m.UUID, &m.Position, &released, &m.PayloadSize, &created); err != nil {
			return GroupInfo{}, nil, s.wrap(ctx, what, err)
		}
		m.Released, m.Created = released != 0, time.UnixMicro(created).UTC()
		msgs = append(msgs, m)
	}
	if err := rows.Err(); err != nil {
		return GroupInfo{}, nil, s.wrap(ctx, what, err)
	}
	return gs[0], msgs, nil
}

// Expire makes the group of key due now, as if its timeout had passed, and
// drops a timeout runner's claim on it: the next pass of a handler's
// timeout runner on the store's region (the aggregator's or resequencer's)
// expires it as its configuration says (releasing or discarding what it
// holds). Nothing happens until such a handler runs. It bumps the group's
// version, so that a handler's change based on the group as it was fails
// with groupstore.ErrConflict and is retried. It fails with an error
// wrapping groupstore.ErrNotFound when there is no such group. It is one
// UPDATE.
func (s *Store) Expire(ctx context.Context, key string) error {
	what := "sqlstore: expire " + dialect.Quote(key)
	cq, err := s.d.Compile(`UPDATE {prefix}GROUP SET DUE_AT = {now}, CLAIMED_UNTIL = NULL, VERSION = VERSION + 1, `+
		`UPDATED_DATE = {now} WHERE GROUP_KEY = :group_key AND REGION = :region`, s.prefix(), dialect.GroupParams...)
	if err != nil {
		return err
	}
	n, err := dialect.Count(s.db.ExecContext(ctx, cq.SQL, s.values(key).args(cq)...))
	if err != nil {
		return s.wrap(ctx, what, err)
	}
	if n == 0 {
		return fmt.Errorf("%s: %w", what, groupstore.ErrNotFound)
	}
	return nil
}

// prefix is the table prefix of the store's tables.
func (s *Store) prefix() string { return strings.TrimSuffix(s.groups, "GROUP") }

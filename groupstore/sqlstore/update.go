package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/lockreg/lockreg/groupstore"
	"github.com/lockreg/lockreg/internal/dialect"
)

// missingOrConflict tells why a conditional statement on the group of v
// changed nothing.
func (s *Store) missingOrConflict(ctx context.Context, tx *sql.Tx, v *values) error {
	var version int64
	q := s.sql.selectVersion
	switch err := tx.QueryRowContext(ctx, q.SQL, v.args(q)...).Scan(&version); {
	case errors.Is(err, sql.ErrNoRows):
		return groupstore.ErrNotFound
	case err != nil:
		return err
	}
	return fmt.Errorf("version %d, not %d: %w", version, v.version, groupstore.ErrConflict)
}

// Update implements [groupstore.Store.Update].
func (s *Store) Update(ctx context.Context, key string, u groupstore.Update) error {
	if err := s.inTx(ctx, func(tx *sql.Tx) error { return s.update(ctx, tx, key, u, false) }); err != nil {
		return s.wrap(ctx, "sqlstore: update "+dialect.Quote(key), err)
	}
	return nil
}

// update applies u to the group of key in tx; held tells that tx holds
// the group's row lock. A release is one statement where the dialect has
// UpdateWith and nothing can change the group between the release and the
// count of what is left: the lock is held, or a change would fail the
// version condition. Otherwise it is two, and the count reads what
// committed in between.
func (s *Store) update(ctx context.Context, tx *sql.Tx, key string, u groupstore.Update, held bool) error {
	v := s.values(key)
	v.version, v.sequence, v.timeout = u.IfVersion, u.LastReleasedSequence, dialect.Micros(u.Timeout)
	shape := 0
	release := u.ReleaseAll || len(u.Release) > 0
	for _, part := range []struct {
		set  bool
		bits int
	}{
		{release, shapeRelease}, {u.Complete, shapeComplete}, {u.SetLastReleasedSequence, shapeSequence},
		{u.Timeout > 0, shapeTimeout}, {u.ClearTimeout, shapeClearTimeout}, {u.IfVersion != 0, shapeIfVersion},
	} {
		if part.set {
			shape |= part.bits
		}
	}
	q, list := s.sql.update[shape], []any(nil)
	if release {
		listed := 0
		if !u.ReleaseAll {
			listed = 1
			for _, id := range u.Release {
				list = append(list, messageKeyOf(id))
			}
		}
		if s.sql.releaseUpdate[shape][0].SQL != "" && (held || u.IfVersion != 0) { // (a listed one's SQL is "")
			q = s.sql.releaseUpdate[shape][listed]
		} else {
			r := [2]dialect.Query{s.sql.releaseAll, s.sql.releaseListed}[listed]
			if _, err := tx.ExecContext(ctx, r.WithList(len(list)), v.args(r, list...)...); err != nil {
				return err
			}
			list = nil
		}
	}
	text := q.SQL
	if list != nil {
		text = q.WithList(len(list))
	}
	if n, err := dialect.Count(tx.ExecContext(ctx, text, v.args(q, list...)...)); err != nil {
		return err
	} else if n == 0 {
		return s.missingOrConflict(ctx, tx, v)
	}
	return nil
}

// Remove implements [groupstore.Store.Remove].
func (s *Store) Remove(ctx context.Context, key string, version int64) error {
	v, del := s.removal(key, version)
	err := s.inTx(ctx, func(tx *sql.Tx) error { return s.remove(ctx, tx, v, del) })
	if err != nil {
		return s.wrap(ctx, "sqlstore: remove "+dialect.Quote(key), err)
	}
	return nil
}

// remove deletes the group of v with del in tx.
func (s *Store) remove(ctx context.Context, tx *sql.Tx, v *values, del dialect.Query) error {
	if n, err := dialect.Count(tx.ExecContext(ctx, del.SQL, v.args(del)...)); err != nil {
		return err
	} else if n == 0 {
		return s.missingOrConflict(ctx, tx, v)
	}
	q := s.sql.removeMessages
	_, err := tx.ExecContext(ctx, q.SQL, v.args(q)...)
	return err
}

// removal returns the values and the statement of a removal of the group
// of key at version (any version if 0).
func (s *Store) removal(key string, version int64) (*values, dialect.Query) {
	v := s.values(key)
	v.version = version
	if version != 0 {
		return v, s.sql.remove[1]
	}
	return v, s.sql.remove[0]
}

// ClaimDue implements [groupstore.Store.ClaimDue].
func (s *Store) ClaimDue(ctx context.Context, limit int, lease time.Duration) ([]groupstore.DueGroup, error) {
	const what = "sqlstore: claim due"
	if limit <= 0 {
		return nil, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	type due struct {
		group groupstore.DueGroup
		gk    string
		at    time.Time
	}
	var claims []due
	scan := func(rows *sql.Rows, err error) error {
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				d  due
				at any
			)
			if err := rows.Scan(&d.group.Key, &d.gk, &d.group.Version, &at); err != nil {
				return err
			}
			var err error
			if d.at, err = dialect.ScanTime(at); err != nil {
				return err
			}
			claims = append(claims, d)
		}
		return rows.Err()
	}
	v := &values{region: s.region, limit: limit, lease: dialect.Micros(lease)}
	if q := s.sql.claimDue; q.SQL != "" { // one statement claims them all
		if err := scan(s.db.QueryContext(ctx, q.SQL, v.args(q)...)); err != nil {
			return nil, s.wrap(ctx, what, err)
		}
		slices.SortFunc(claims, func(a, b due) int { return a.at.Compare(b.at) })
	} else {
		q := s.sql.selectDue
		if err := scan(s.db.QueryContext(ctx, q.SQL, v.args(q)...)); err != nil {
			return nil, s.wrap(ctx, what, err)
		}
		won, claim := claims[:0], s.sql.claimOne
		for _, d := range claims {
			v.groupKey, v.version = d.gk, d.group.Version
			if n, err := dialect.Count(s.db.ExecContext(ctx, claim.SQL, v.args(claim)...)); err != nil {
				return nil, s.wrap(ctx, what, err)
			} else if n == 1 {
				won = append(won, d)
			}
		}
		claims = won
	}
	out := make([]groupstore.DueGroup, len(claims))
	for i, d := range claims {
		out[i] = d.group
	}
	return out, nil
}

package sqlstore

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/lockreg/lockreg/internal/cleanup"
	"github.com/lockreg/lockreg/internal/dialect"
	"github.com/lockreg/lockreg/jdbc"
	"github.com/lockreg/lockreg/registry"
)

// DeleteCompleted deletes the finished groups of the store's region that
// have not changed for olderThan, with the rows that remember their
// messages, and returns how many groups it deleted. Finished means
// complete, without unreleased messages and without a due time (see
// Config.CleanupRetention); open groups and groups with a pending timeout
// are never deleted. A message of a deleted group is no longer recognised:
// Add treats it as the first of a new group. The background clean-up calls
// it with its retention; call it yourself with DisableCleanup.
//
// It deletes at most 1000 rows per statement, in as many statements as it
// takes, each in its own implicit transaction: message rows first, then
// the groups left without any (on MySQL each batch first SELECTs up to 1000
// finished groups, a consistent read that locks nothing, and the DELETEs
// then name them). Each statement scans the region's groups without a due
// time. olderThan must not be negative.
func (s *Store) DeleteCompleted(ctx context.Context, olderThan time.Duration) (int64, error) {
	const what = "sqlstore: delete completed"
	if olderThan < 0 {
		return 0, fmt.Errorf("%s: olderThan %v: %w", what, olderThan, ErrInvalidConfig)
	}
	n, err := s.deleteCompleted(ctx, olderThan, nil)
	if err != nil {
		return n, s.wrap(ctx, what, err)
	}
	return n, nil
}

// sweep is the background clean-up's pass.
func (s *Store) sweep(ctx context.Context, between cleanup.Between) error {
	if _, err := s.deleteCompleted(ctx, s.retention, between); err != nil {
		return s.wrap(ctx, "sqlstore: clean-up of "+s.groups, err)
	}
	return nil
}

// deleteCompleted deletes finished groups in batches, calling between after
// each full batch, and returns the groups it deleted.
func (s *Store) deleteCompleted(ctx context.Context, retention time.Duration, between cleanup.Between) (int64, error) {
	v := &values{region: s.region, retention: dialect.Micros(retention), batch: cleanup.Batch}
	if s.sql.selectFinished.SQL != "" {
		return cleanup.Drain(ctx, func(ctx context.Context) (int64, bool, error) { return s.sweepSelected(ctx, v) }, between)
	}
	batch := func(q dialect.Query) func(context.Context) (int64, bool, error) {
		return func(ctx context.Context) (int64, bool, error) {
			n, err := dialect.Count(s.db.ExecContext(ctx, q.SQL, v.args(q)...))
			return n, n == cleanup.Batch, err
		}
	}
	if _, err := cleanup.Drain(ctx, batch(s.sql.sweepMessages), between); err != nil {
		return 0, err
	}
	return cleanup.Drain(ctx, batch(s.sql.sweepGroups), between)
}

// sweepSelected deletes one batch of finished groups that a consistent
// read selects first (MySQL's way; see dialect.GroupSQL), and reports
// whether it was full.
func (s *Store) sweepSelected(ctx context.Context, v *values) (int64, bool, error) {
	sel := s.sql.selectFinished
	keys, err := dialect.Strings(s.db.QueryContext(ctx, sel.SQL, v.args(sel)...))
	if err != nil || len(keys) == 0 {
		return 0, false, err
	}
	list := make([]any, len(keys))
	for i, k := range keys {
		list[i] = k
	}
	msgs, groups := s.sql.sweepMessages, s.sql.sweepGroups
	for {
		n, err := dialect.Count(s.db.ExecContext(ctx, msgs.WithList(len(list)), v.args(msgs, list...)...))
		if err != nil {
			return 0, false, err
		}
		if n < cleanup.Batch {
			break
		}
	}
	n, err := dialect.Count(s.db.ExecContext(ctx, groups.WithList(len(list)), v.args(groups, list...)...))
	return n, len(keys) == cleanup.Batch, err
}

// groupLeaseKey is the LOCK_KEY of the clean-up's lease.
func groupLeaseKey(prefix string) string { return jdbc.UUIDKey("lockreg cleanup " + prefix + "GROUP") }

// leaseRepository is the lock repository of the clean-up's lease, made at
// the first pass (NewLockRepository checks the lock table, one SELECT):
// its statements are never prepared, as a lease once an interval is not
// worth a prepared statement on each connection, and it neither listens
// nor cleans, so it holds nothing that Close would free.
type leaseRepository struct {
	db   DB
	opts []jdbc.Option

	mu   sync.Mutex
	repo *jdbc.LockRepository
}

func (l *leaseRepository) get(ctx context.Context) (*jdbc.LockRepository, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.repo == nil {
		repo, err := jdbc.NewLockRepository(ctx, l.db, append(l.opts, jdbc.WithoutCleanup(), jdbc.WithoutPreparedStatements(),
			jdbc.WithKeyMapping(func(k string) string { return k }))...) // the lease key is a LOCK_KEY
		if err != nil {
			return nil, err
		}
		l.repo = repo
	}
	return l.repo, nil
}

func (l *leaseRepository) Acquire(ctx context.Context, key string, ttl time.Duration) (registry.Lease, bool, error) {
	repo, err := l.get(ctx)
	if err != nil {
		return registry.Lease{}, false, err
	}
	return repo.Acquire(ctx, key, ttl)
}

func (l *leaseRepository) Renew(ctx context.Context, key string, ttl time.Duration) error {
	repo, err := l.get(ctx)
	if err != nil {
		return err
	}
	return repo.Renew(ctx, key, ttl)
}

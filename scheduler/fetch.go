package scheduler

import (
	"context"
	"database/sql"
	"time"
)

// pick picks up to n due executions in one statement (PostgreSQL, SQLite)
// or one transaction of two (MySQL/MariaDB), holds them and queues them
// for the workers. It returns how many it picked.
func (s *Scheduler) pick(n int) (int, error) {
	ctx, cancel := ioCtx()
	defer cancel()
	var picked []*Execution
	var err error
	if s.cfg.d.Name == "mysql" {
		picked, err = s.pickMySQL(ctx, n)
	} else {
		picked, err = s.query(ctx, s.db, s.sql.pick.SQL, s.sql.args(s.sql.pick, vals{n: n}, s.cfg.names...)...)
	}
	if err != nil {
		return 0, s.cfg.wrap(ctx, s.db, "scheduler: pick", err)
	}
	now := time.Now()
	rs := make([]*running, len(picked))
	s.mu.Lock()
	for i, e := range picked {
		rctx, rcancel := context.WithCancelCause(s.runCtx)
		rs[i] = &running{e: e, task: s.cfg.tasks[e.Task], ctx: rctx, cancel: rcancel, picked: now}
		s.held[execKey{e.Task, e.Instance}] = rs[i]
	}
	s.mu.Unlock()
	// Sent without the lock, which the workers take: held, and so the
	// queue, stays within FetchLimit, but should a pick return more rows
	// than asked this waits for the workers rather than stall them all.
	for _, r := range rs {
		select {
		case s.queue <- r:
		case <-s.stopping: // it stays held, and Stop unpicks it
		}
	}
	s.tel.picked(len(picked))
	return len(picked), nil
}

func (s *Scheduler) pickMySQL(ctx context.Context, n int) ([]*Execution, error) {
	// READ COMMITTED: InnoDB's locking read then locks the rows it picks,
	// not the gaps of the index range, which deadlocked with other nodes'
	// single-row completions under REPEATABLE READ.
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	sel := s.sql.pickSelect
	picked, err := s.query(ctx, tx, sel.SQL, s.sql.args(sel, vals{n: n}, s.cfg.names...)...)
	if err != nil || len(picked) == 0 {
		return nil, err
	}
	upd := s.sql.pickUpdate
	args := s.sql.args(upd, vals{})
	for _, e := range picked {
		args = append(args, e.Task, e.Instance)
	}
	if _, err := tx.ExecContext(ctx, upd.SQL+tuples(len(picked)), args...); err != nil {
		return nil, err
	}
	if err := tx.Commit(); err != nil {
		return nil, err
	}
	for _, e := range picked { // the rows as the UPDATE left them, under our locks
		e.Picked, e.PickedBy, e.Version = true, s.cfg.Name, e.Version+1
	}
	return picked, nil
}

// query returns the executions a query reads.
func (s *Scheduler) query(ctx context.Context, q querier, query string, args ...any) ([]*Execution, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*Execution
	for rows.Next() {
		e, err := s.cfg.scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// nextDue returns when, by the host's clock, the next unpicked execution
// is due by the database's, and at most PollInterval from now.
func (s *Scheduler) nextDue() time.Time {
	ctx, cancel := ioCtx()
	defer cancel()
	latest := time.Now().Add(s.pollWait())
	var next, now any
	q := s.sql.nextDue
	if err := s.db.QueryRowContext(ctx, q.SQL, s.sql.args(q, vals{}, s.cfg.names...)...).Scan(&next, &now); err != nil {
		s.tel.fetchFailed(s.cfg.wrap(ctx, s.db, "scheduler: next due time", err))
		return latest
	}
	nt, err1 := s.cfg.readTime(next)
	dt, err2 := s.cfg.readTime(now)
	if err1 != nil || err2 != nil || nt.IsZero() {
		return latest
	}
	if at := time.Now().Add(nt.Sub(dt)); at.Before(latest) {
		return at
	}
	return latest
}

// unpick unpicks executions taken from held, each guarded by its version,
// in one statement per maxGuarded, and returns how many it unpicked.
func (s *Scheduler) unpick(all []*running) int {
	if len(all) == 0 {
		return 0
	}
	ctx, cancel := ioCtx()
	defer cancel()
	es := make([]*Execution, len(all))
	for i, r := range all {
		es[i] = r.e
	}
	_, n, err := s.guarded(ctx, s.db, s.sql.unpick, es)
	if err != nil {
		s.tel.log.Error("scheduler: unpick at stop failed; the executions are revived as dead later",
			"scheduler", s.cfg.Name, "executions", len(all), "err", err)
		return 0
	}
	s.tel.unpicked(n)
	return n
}

// notifyHandOff wakes the other schedulers on PostgreSQL after a stop
// unpicked executions.
func (s *Scheduler) notifyHandOff() {
	ctx, cancel := ioCtx()
	defer cancel()
	if _, err := s.db.ExecContext(ctx, `SELECT pg_notify($1, '0')`, s.cfg.channel()); err != nil {
		s.tel.log.Warn("scheduler: hand-off notification failed", "scheduler", s.cfg.Name, "err", err)
	}
}

// inTx runs f in a transaction and commits it.
func (s *Scheduler) inTx(ctx context.Context, f func(*sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := f(tx); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

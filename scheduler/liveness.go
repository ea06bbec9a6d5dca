package scheduler

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/lockreg/lockreg/internal/dialect"
)

// livenessLoop heartbeats the held executions and looks for dead ones every
// HeartbeatInterval, until Stop has waited for the workers.
func (s *Scheduler) livenessLoop() {
	defer s.loops.Done()
	t := time.NewTicker(s.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-s.live:
			return
		case <-t.C:
		}
		s.heartbeat()
		select {
		case <-s.stopping: // a stopping scheduler revives nothing
			continue
		default:
		}
		s.reviveDead()
		s.deleteUnresolved()
	}
}

// heartbeat writes last_heartbeat, by the database's clock, of every held
// execution in one statement guarded by their versions; an execution whose
// guard fails was taken (revived as dead elsewhere): its handler's context
// is cancelled with cause ErrLost.
func (s *Scheduler) heartbeat() {
	s.mu.Lock()
	all := make([]*running, 0, len(s.held))
	es := make([]*Execution, 0, len(s.held))
	for _, r := range s.held {
		if !r.ending.Load() {
			all, es = append(all, r), append(es, r.e)
		}
	}
	s.mu.Unlock()
	if len(all) == 0 {
		return
	}
	ctx, cancel := ioCtx()
	defer cancel()
	var ours map[execKey]bool
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		keys, n, err := s.guarded(ctx, tx, s.sql.heartbeat, es)
		if err == nil && keys == nil && n < len(es) { // MySQL: which rows did it miss?
			keys, err = s.holding(ctx, tx, es)
		}
		ours = keys
		return err
	})
	if err != nil {
		s.tel.log.Warn("scheduler: heartbeat failed", "scheduler", s.cfg.Name, "executions", len(all),
			"err", s.cfg.wrap(ctx, s.db, "scheduler: heartbeat", err))
		return
	}
	for _, r := range all {
		if ours != nil && !ours[execKey{r.e.Task, r.e.Instance}] && !r.ending.Load() { // not its own completion's doing
			s.tel.log.Warn("scheduler: execution lost: its row changed while picked by this scheduler",
				"task", r.e.Task, "instance", r.e.Instance, "version", r.e.Version)
			r.cancel(ErrLost)
		}
	}
}

// reviveDead hands every dead execution of a known task to its task's dead
// handler and records the handler's completion as a failure, guarded by the
// version read, so that of many schedulers finding it dead one revives it.
// It writes apart from the completions' group commit and skips a row that
// another transaction holds locked (a paused node's heartbeat or
// completion): a stalled node stalls neither this one's completions nor
// its other revives; the skipped row is tried again at the next check.
func (s *Scheduler) reviveDead() {
	ctx, cancel := ioCtx()
	defer cancel()
	q := s.sql.dead
	dead, err := s.query(ctx, s.db, q.SQL, s.sql.args(q, vals{delay: s.deadAfter()}, s.cfg.names...)...)
	if err != nil {
		s.tel.log.Warn("scheduler: dead-execution check failed", "err", s.cfg.wrap(ctx, s.db, "scheduler: dead executions", err))
		return
	}
	for _, e := range dead {
		t := s.cfg.tasks[e.Task]
		cp := &completion{e: e, c: t.onDead(ctx, e), failure: true}
		if err := s.revive(ctx, cp); err != nil {
			s.tel.log.Warn("scheduler: revive of a dead execution failed", "task", e.Task, "instance", e.Instance,
				"version", e.Version, "err", s.cfg.wrap(ctx, s.db, "scheduler: revive", err))
			continue
		}
		if cp.written {
			s.tel.log.Warn("scheduler: dead execution handled", "task", e.Task, "instance", e.Instance,
				"version", e.Version, "picked_by", e.PickedBy, "last_heartbeat", e.LastHeartbeat)
			s.tel.dead(e)
			if !cp.hint.IsZero() {
				s.hint(cp.hint)
			}
		}
	}
}

// revive writes a dead execution's completion in a transaction of its own,
// after locking its row without waiting (PostgreSQL, MySQL/MariaDB).
func (s *Scheduler) revive(ctx context.Context, cp *completion) error {
	s.encode(cp)
	return s.inTx(ctx, func(tx *sql.Tx) error {
		cp.written = false
		if lr := s.sql.lockRow; lr.SQL != "" {
			v := vals{task: cp.e.Task, inst: cp.e.Instance, version: cp.e.Version}
			var one int
			err := tx.QueryRowContext(ctx, lr.SQL, s.sql.args(lr, v)...).Scan(&one)
			if errors.Is(err, sql.ErrNoRows) { // locked by another transaction, or changed
				return nil
			} else if err != nil {
				return err
			}
		}
		ok, err := s.writeOne(ctx, tx, cp)
		cp.written = ok
		return err
	})
}

// deadAfter is how old a heartbeat makes an execution dead.
func (s *Scheduler) deadAfter() time.Duration {
	return time.Duration(s.cfg.MissedHeartbeats) * s.cfg.HeartbeatInterval
}

// deleteUnresolved deletes old unpicked executions of unknown tasks when
// DeleteUnresolvedAfter is set.
func (s *Scheduler) deleteUnresolved() {
	if s.cfg.DeleteUnresolvedAfter <= 0 {
		return
	}
	ctx, cancel := ioCtx()
	defer cancel()
	q := s.sql.unresolved
	n, err := dialect.Count(s.db.ExecContext(ctx, q.SQL, s.sql.args(q, vals{delay: s.cfg.DeleteUnresolvedAfter}, s.cfg.names...)...))
	if err != nil {
		s.tel.log.Warn("scheduler: delete of unresolved executions failed", "err", err)
	} else if n > 0 {
		s.tel.log.Warn("scheduler: deleted executions of unknown tasks", "rows", n, "older_than", s.cfg.DeleteUnresolvedAfter)
	}
}

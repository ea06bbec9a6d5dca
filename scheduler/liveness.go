package scheduler

import (
	"database/sql"
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
// execution, in one transaction, guarded by version; an execution whose
// guard fails was taken (revived as dead elsewhere): its handler's context
// is cancelled with cause ErrLost.
func (s *Scheduler) heartbeat() {
	s.mu.Lock()
	all := make([]*running, 0, len(s.held))
	for _, r := range s.held {
		if !r.ending.Load() {
			all = append(all, r)
		}
	}
	s.mu.Unlock()
	if len(all) == 0 {
		return
	}
	ctx, cancel := ioCtx()
	defer cancel()
	var lost []*running
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		lost = lost[:0]
		for _, r := range all {
			n, err := dialect.Count(tx.ExecContext(ctx, s.sql.heartbeat.SQL,
				s.sql.args(s.sql.heartbeat, vals{task: r.e.Task, inst: r.e.Instance, version: r.e.Version})...))
			if err != nil {
				return err
			}
			if n == 0 && !r.ending.Load() { // not its own completion's doing
				lost = append(lost, r)
			}
		}
		return nil
	})
	if err != nil {
		s.tel.log.Warn("scheduler: heartbeat failed", "scheduler", s.cfg.Name, "executions", len(all),
			"err", s.cfg.wrap(ctx, s.db, "scheduler: heartbeat", err))
		return
	}
	for _, r := range lost {
		s.tel.log.Warn("scheduler: execution lost: its row changed while picked by this scheduler",
			"task", r.e.Task, "instance", r.e.Instance, "version", r.e.Version)
		r.cancel(ErrLost)
	}
}

// reviveDead hands every dead execution of a known task to its task's dead
// handler and records the handler's completion as a failure, guarded by the
// version read, so that of many schedulers finding it dead one revives it.
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
		s.write(cp)
		if cp.written {
			s.tel.log.Warn("scheduler: dead execution handled", "task", e.Task, "instance", e.Instance,
				"picked_by", e.PickedBy, "last_heartbeat", e.LastHeartbeat)
			s.tel.dead(e)
		}
	}
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

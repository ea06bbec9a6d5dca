package scheduler

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/lockreg/lockreg/internal/dialect"
	"github.com/lockreg/lockreg/internal/groupcommit"
)

// completion is one write of an execution's end, batched with others.
type completion struct {
	e       *Execution
	c       Completion
	failure bool
	data    []byte // c's data or next's, encoded
	prio    int    // next's priority

	hint    time.Time // when the execution it leaves is due, told to the fetch loop after the commit
	written bool      // the guard held: the completion is recorded
	err     error     // it could not be written
}

// execute runs r's handler and records its completion.
func (s *Scheduler) execute(r *running) {
	e, t := r.e, r.task
	if r.ctx.Err() != nil { // lost while it waited for a thread: another node has it
		s.tel.finished(e, "refused")
		s.release(r)
		return
	}
	ctx, end := s.tel.startSpan(r.ctx, e)
	s.tel.started(e, r.picked)
	c, err := safeRun(ctx, t, e)
	failure := err != nil
	if failure {
		f := Failure{Execution: e, Err: err, Schedule: t.schedule}
		if t.stored {
			f.Schedule, _ = e.storedSchedule()
		}
		c = safeHandle(ctx, t, f)
	}
	cp := &completion{e: e, c: c, failure: failure}
	r.ending.Store(true)
	abandoned := !s.holds(r)
	if !abandoned {
		s.write(cp)
	}
	end(err)
	outcome := "succeeded"
	switch {
	case abandoned:
		outcome = "abandoned"
		s.tel.log.Warn("scheduler: execution abandoned at Stop: it is unpicked for another node",
			"task", e.Task, "instance", e.Instance, "version", e.Version)
	case errors.Is(cp.err, errUncertain):
		outcome = "unrecorded"
		s.tel.log.Warn("scheduler: completion's outcome unknown: an attempt whose reply was lost may have recorded it",
			"task", e.Task, "instance", e.Instance, "version", e.Version)
	case cp.err != nil:
		outcome = "unrecorded"
		s.tel.log.Error("scheduler: completion not recorded; the execution is revived as dead later",
			"task", e.Task, "instance", e.Instance, "version", e.Version, "err", cp.err)
	case !cp.written:
		outcome = "refused"
		s.tel.log.Warn("scheduler: completion refused: the execution was taken from this scheduler",
			"task", e.Task, "instance", e.Instance, "version", e.Version)
	case failure:
		outcome = "failed"
		s.tel.log.Warn("scheduler: execution failed", "task", e.Task, "instance", e.Instance, "version", e.Version,
			"consecutive_failures", e.ConsecutiveFailures+1, "err", err)
	}
	s.tel.finished(e, outcome)
	s.release(r)
}

// safeRun runs the handler, turning a panic into an error wrapping ErrPanic.
func safeRun(ctx context.Context, t *Task, e *Execution) (c Completion, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("%w: %s/%s: %v", ErrPanic, e.Task, e.Instance, v)
		}
	}()
	return t.run(ctx, e)
}

// safeHandle runs the failure handler; one that panics leaves the
// execution to be retried after 5 minutes.
func safeHandle(ctx context.Context, t *Task, f Failure) (c Completion) {
	defer func() {
		if v := recover(); v != nil {
			c = RescheduleAfter(5 * time.Minute)
		}
	}()
	return t.onFailure(ctx, f)
}

// write records cp, batched with the completions of other threads in one
// transaction, retrying transient failures for a while.
func (s *Scheduler) write(cp *completion) {
	s.encode(cp)
	s.complete.Do(&groupcommit.Call[*completion]{Ctx: context.Background(), Item: cp})
}

// encode encodes cp's data; data that does not encode is logged and the
// completion becomes a failure rescheduled in 5 minutes, without it.
func (s *Scheduler) encode(cp *completion) {
	if err := s.encodeCompletion(cp); err != nil {
		cp.c, cp.failure = RescheduleAfter(5*time.Minute), true
		s.tel.log.Error("scheduler: completion data does not encode; retrying in 5 min", "task", cp.e.Task,
			"instance", cp.e.Instance, "err", err)
	}
}

func (s *Scheduler) encodeCompletion(cp *completion) error {
	c := cp.c
	var v any
	switch {
	case c.op == opReschedule && c.hasData:
		v = c.data
	case c.op == opReplace:
		v = c.next.Data
		if t, ok := s.cfg.tasks[c.next.Task]; ok && c.next.Priority == 0 {
			cp.prio = t.priority
		} else if cp.prio = c.next.Priority; cp.prio == 0 {
			cp.prio = PriorityMedium
		}
		if err := checkID("task name", c.next.Task); err != nil {
			return err
		}
		if err := checkID("instance id", c.next.ID); err != nil {
			return err
		}
	default:
		return nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrData, err)
	}
	cp.data = b
	return nil
}

// writeBatch writes a batch of completions in one transaction; when that
// fails, each alone, so that one bad write does not fail the others.
func (s *Scheduler) writeBatch(batch []*groupcommit.Call[*completion]) {
	ctx, cancel := ioCtx()
	defer cancel()
	all := make([]*completion, len(batch))
	for i, c := range batch {
		all[i] = c.Item
	}
	defer func() {
		for _, cp := range all {
			if cp.written && cp.err == nil && !cp.hint.IsZero() {
				s.hint(cp.hint)
			}
		}
	}()
	// lost: an attempt failed in a way that leaves its commit unknown (the
	// connection went with the reply), so a retry's refusal may be of
	// this scheduler's own write.
	batchLost := false
	if len(all) > 1 {
		err := s.writeTx(ctx, all)
		if err == nil {
			return
		}
		batchLost = dialect.IsTransient(err)
	}
	for _, cp := range all {
		var err error
		lost := batchLost
		for attempt := 0; attempt < 5; attempt++ {
			if err = s.writeTx(ctx, []*completion{cp}); err == nil || !dialect.IsTransient(err) {
				break
			}
			lost = true
			time.Sleep(time.Duration(attempt+1) * 100 * time.Millisecond)
		}
		if err == nil && lost && !cp.written {
			err = errUncertain
		}
		cp.err = err
	}
}

// errUncertain is a completion whose retry was refused after an attempt
// whose outcome is unknown: that attempt may have written it.
var errUncertain = errors.New("scheduler: completion refused on retry after an attempt whose reply was lost: it may be recorded")

func (s *Scheduler) writeTx(ctx context.Context, all []*completion) error {
	// One statement commits on its own: no BEGIN and COMMIT round trips.
	if len(all) == 1 && all[0].c.op != opReplace {
		ok, err := s.writeOne(ctx, s.db, all[0])
		all[0].written = ok
		return err
	}
	if s.cfg.d.Name != "mysql" && !slices.ContainsFunc(all, func(cp *completion) bool { return cp.c.op != opRemove }) {
		return s.removeBatch(ctx, s.db, all) // RETURNING says which it deleted
	}
	return s.inTx(ctx, func(tx *sql.Tx) error {
		var removes []*completion
		for _, cp := range all {
			if cp.c.op == opRemove && len(all) > 1 {
				removes = append(removes, cp)
				continue
			}
			ok, err := s.writeOne(ctx, tx, cp)
			if err != nil {
				return err
			}
			cp.written = ok
		}
		return s.removeBatch(ctx, tx, removes)
	})
}

// errPartial makes writeTx roll back a batch of removals on MySQL that
// deleted fewer rows than it had, so that each is written alone and its
// refusal known.
var errPartial = errors.New("scheduler: batch removal refused in part")

// removeBatch deletes the rows of removes in one statement, each guarded
// by its version: one round trip for a batch of completed one-time
// executions. PostgreSQL and SQLite return the rows deleted; on MySQL,
// which cannot, a count short of the batch is errPartial.
func (s *Scheduler) removeBatch(ctx context.Context, tx querier, removes []*completion) error {
	if len(removes) == 0 {
		return nil
	}
	es := make([]*Execution, len(removes))
	for i, cp := range removes {
		es[i] = cp.e
	}
	deleted, n, err := s.guarded(ctx, tx, s.sql.removeIn, es)
	if err == nil && deleted == nil && n != len(removes) {
		err = errPartial
	}
	for _, cp := range removes {
		cp.written = err == nil && (deleted == nil || deleted[execKey{cp.e.Task, cp.e.Instance}])
	}
	return err
}

// writeOne writes one completion in tx (a transaction when it has two
// statements, a Replace) and reports whether its version guard held.
func (s *Scheduler) writeOne(ctx context.Context, tx querier, cp *completion) (bool, error) {
	e, c, st := cp.e, cp.c, s.sql
	v := vals{task: e.Task, inst: e.Instance, version: e.Version, data: cp.data, at: c.at, delay: c.after}
	q := st.remove
	if c.op == opReschedule {
		q = st.completion(complKey{failure: cp.failure, relative: c.at.IsZero(), data: c.hasData})
	}
	n, err := dialect.Count(tx.ExecContext(ctx, q.SQL, st.args(q, v)...))
	if err != nil || n == 0 {
		return false, err
	}
	switch c.op {
	case opReplace:
		next := vals{task: c.next.Task, inst: c.next.ID, data: cp.data, at: c.nextTime, prio: cp.prio}
		if s.cfg.d.Name == "postgres" {
			var inserted, notified sql.NullInt64
			dst := []any{&inserted}
			if !s.cfg.NoNotify {
				dst = append(dst, &notified)
			}
			err = tx.QueryRowContext(ctx, st.insert.SQL, st.args(st.insert, next)...).Scan(dst...)
		} else {
			_, err = tx.ExecContext(ctx, st.insert.SQL, st.args(st.insert, next)...)
		}
		if err != nil {
			return false, err
		}
		cp.hint = c.nextTime
	case opReschedule:
		if cp.hint = c.at; c.at.IsZero() {
			cp.hint = time.Now().Add(c.after)
		}
	}
	return true, nil
}

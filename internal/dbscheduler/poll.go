package dbscheduler

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"
)

// Poll fetches due executions once, by the node's polling strategy, runs
// each it picked with run on up to Threads goroutines, and completes it as
// a one-time task does: S8 (remove, guarded by the pick's version) after a
// success, S9 (OnFailureRetryLater: execution_time now + RetryDelay,
// last_failure, consecutive_failures + 1, unpicked, version + 1) after an
// error. It returns the executions it picked, each with how its run and
// completion ended (Execution.Err, Execution.Completion: Java logs a
// completion that fails and goes on, and so does Poll); the error is the
// fetch's.
//
// FETCH is S3 (due, unpicked, not blacklisted, by execution_time, LIMIT
// Limit), then per row on a thread S4 (the optimistic pick, guarded by the
// version read) and, when it picked the row, S1 (the re-read).
// LOCK_AND_FETCH is S5 on PostgreSQL, and S7 (unpick) for the rows of
// names the node cannot resolve.
func (n *Node) Poll(ctx context.Context, run func(ctx context.Context, e *Execution) error) ([]*Execution, error) {
	if n.LockAndFetch {
		picked, err := n.lockAndFetch(ctx)
		if err != nil {
			return nil, err
		}
		n.runAll(ctx, picked, nil, run)
		return picked, nil
	}
	filter, fargs := n.unresolvedFilter()
	due, err := n.query(ctx, false, true, `select * from `+n.table()+` where picked = ? and execution_time <= ?`+filter+
		` ORDER BY execution_time ASC LIMIT `+strconv.Itoa(n.limit()), append([]any{false, n.ts(n.now())}, fargs...)...)
	if err != nil {
		return nil, err
	}
	return n.runAll(ctx, due, n.pick, run), nil
}

// lockAndFetch is S5, then S7 for the rows it picked of unresolved names
// (lockAndFetchSingleStatement, v16.12.0).
func (n *Node) lockAndFetch(ctx context.Context) ([]*Execution, error) {
	now := n.ts(n.now())
	filter, fargs := n.unresolvedFilter()
	q := ` WITH locked_executions as (UPDATE ` + n.table() + ` st1 SET picked = ?, picked_by = ?, last_heartbeat = ?, version = version + 1 ` +
		` WHERE (st1.task_name, st1.task_instance) IN (SELECT st2.task_name, st2.task_instance FROM ` + n.table() + ` st2 ` +
		` WHERE picked = ? and execution_time <= ? ` + filter + ` ORDER BY execution_time ASC FOR UPDATE SKIP LOCKED LIMIT ` +
		strconv.Itoa(n.limit()) + `) RETURNING st1.*)  SELECT * FROM locked_executions ORDER BY execution_time ASC`
	all, err := n.query(ctx, true, true, q, append([]any{true, n.pickedBy(), now, false, now}, fargs...)...)
	if err != nil {
		return nil, err
	}
	var picked []*Execution
	for _, e := range all {
		if !n.resolve(e, false) {
			// S7, one statement of the JDBC batch; a failure is logged.
			n.exec(ctx, `update `+n.table()+` set picked = ?, picked_by = ?, version = version + 1 `+
				`where picked = ? and version = ? and task_name = ? and task_instance = ?`,
				false, nil, true, e.Version, e.Task, e.Instance)
			continue
		}
		picked = append(picked, e)
	}
	return picked, nil
}

// pick is PickDue's S4 and, when it picked the row, S1: the picked
// execution, nil when another node picked it first (ALREADY_PICKED).
func (n *Node) pick(ctx context.Context, e *Execution) (*Execution, error) {
	k, err := n.exec(ctx, `update `+n.table()+` set picked = ?, picked_by = ?, last_heartbeat = ?, version = version + 1 `+
		`where picked = ? and task_name = ? and task_instance = ? and version = ?`,
		true, n.pickedBy(), n.ts(n.now()), false, e.Task, e.Instance, e.Version)
	if err != nil || k != 1 {
		return nil, err
	}
	p, err := n.get(ctx, e.Task, e.Instance)
	if err != nil {
		return nil, err
	}
	if p == nil || !p.Picked {
		return nil, errors.New("dbscheduler: Unable to find picked execution. Must have been deleted by another thread. Indicates a bug.")
	}
	return p, nil
}

// runAll runs candidates on the node's threads: each is picked with pick
// first (FETCH; nil when LOCK_AND_FETCH picked them already), then run and
// completed. It returns the executions picked.
func (n *Node) runAll(ctx context.Context, candidates []*Execution, pick func(context.Context, *Execution) (*Execution, error),
	run func(context.Context, *Execution) error) []*Execution {
	next := make(chan int)
	picked := make([]*Execution, len(candidates))
	var wg sync.WaitGroup
	for range min(n.threads(), len(candidates)) {
		wg.Go(func() {
			for i := range next {
				e := candidates[i]
				if pick != nil {
					var err error
					if e, err = pick(ctx, e); err != nil || e == nil {
						continue // logged by Java; the row is due again at the next fetch
					}
				}
				n.execute(ctx, e, run)
				picked[i] = e
			}
		})
	}
	for i := range candidates {
		next <- i
	}
	close(next)
	wg.Wait()
	var out []*Execution
	for _, e := range picked {
		if e != nil {
			out = append(out, e)
		}
	}
	return out
}

// execute is ExecutePicked: e is among the running executions (those
// Heartbeat updates) while its handler runs and it is completed.
func (n *Node) execute(ctx context.Context, e *Execution, run func(context.Context, *Execution) error) {
	n.mu.Lock()
	if n.running == nil {
		n.running = map[string]*Execution{}
	}
	n.running[e.key()] = e
	n.mu.Unlock()
	defer func() {
		n.mu.Lock()
		delete(n.running, e.key())
		n.mu.Unlock()
	}()
	e.Err = run(ctx, e)
	var k int64
	if e.Err == nil { // S8
		k, e.Completion = n.exec(ctx, `delete from `+n.table()+` where task_name = ? and task_instance = ? and version = ?`,
			e.Task, e.Instance, e.Version)
	} else {
		k, e.Completion = n.reschedule(ctx, e, n.now().Add(n.retryDelay()), e.LastSuccess, n.now(), e.ConsecutiveFailures+1)
	}
	if e.Completion == nil && k != 1 {
		e.Completion = ErrNotCompleted
	}
}

// reschedule is S9 (JdbcTaskRepository.reschedule, ExecutionUpdate): the
// execution unpicked at time at, with the given last_success,
// last_failure and consecutive_failures, version + 1, guarded by its
// version. It returns the rows it affected.
func (n *Node) reschedule(ctx context.Context, e *Execution, at, lastSuccess, lastFailure time.Time, failures int) (int64, error) {
	return n.exec(ctx, `UPDATE `+n.table()+` SET execution_time = ?, picked = ?, picked_by = ?, last_success = ?, last_failure = ?, `+
		`consecutive_failures = ?, last_heartbeat = ?, version = ? WHERE task_name = ? AND task_instance = ? AND version = ?`,
		n.ts(at), false, nil, n.nullTS(lastSuccess), n.nullTS(lastFailure), failures, nil, e.Version+1, e.Task, e.Instance, e.Version)
}

package dbscheduler

import (
	"context"
	"errors"
)

// Heartbeat is the housekeeper's updateHeartbeats, which Java runs every
// heartbeatInterval: S11 (last_heartbeat now, guarded by the version) for
// each execution the node is running, not for those picked and waiting
// for a thread, tried up to three times. It returns how many heartbeats
// it wrote; an S11 that matches no row (the execution completed or was
// taken meanwhile) is no error, as in Java.
func (n *Node) Heartbeat(ctx context.Context) (int, error) {
	n.mu.Lock()
	running := make([]*Execution, 0, len(n.running))
	for _, e := range n.running {
		running = append(running, e)
	}
	n.mu.Unlock()
	var errs []error
	written := 0
	for _, e := range running {
		var err error
		for range 3 { // updateHeartbeatWithRetry
			var k int64
			if k, err = n.exec(ctx, `update `+n.table()+` set last_heartbeat = ? where task_name = ? and task_instance = ? and version = ?`,
				n.ts(n.now()), e.Task, e.Instance, e.Version); err == nil {
				written += int(k)
				break
			}
		}
		errs = append(errs, err)
	}
	return written, errors.Join(errs...)
}

// DeleteUnresolved is the first half of the housekeeper's
// detectDeadExecutions, which Java runs every 2 × heartbeatInterval: for
// each blacklisted name whose first row seen was due longer than
// DeleteUnresolvedAfter ago, S13 (every row of the name, picked ones
// too), then the name leaves the blacklist. It returns the rows deleted.
func (n *Node) DeleteUnresolved(ctx context.Context) (int64, error) {
	n.mu.Lock()
	var old []string
	for name, first := range n.unresolved {
		if n.now().Sub(first) > n.deleteUnresolvedAfter() {
			old = append(old, name)
		}
	}
	n.mu.Unlock()
	var deleted int64
	for _, name := range old {
		k, err := n.exec(ctx, `delete from `+n.table()+` where task_name = ?`, name)
		if err != nil {
			return deleted, err
		}
		deleted += k
		n.mu.Lock()
		delete(n.unresolved, name)
		n.mu.Unlock()
	}
	return deleted, nil
}

// ReviveDead is the second half of detectDeadExecutions: S12 (picked, with
// a heartbeat older than MissedHeartbeats × HeartbeatInterval by the
// host's clock, names not blacklisted; a row of an unknown name
// blacklists it and is left alone), then for each the default
// DeadExecutionHandler, ReviveDeadExecution: S9 to now as a failure
// (last_failure now, consecutive_failures + 1, unpicked, version + 1,
// guarded by the version read). It returns the executions it revived, as
// S12 read them.
func (n *Node) ReviveDead(ctx context.Context) ([]*Execution, error) {
	filter, fargs := n.unresolvedFilter()
	dead, err := n.query(ctx, false, true, `select * from `+n.table()+` where picked = ? and last_heartbeat <= ? `+filter+
		` order by last_heartbeat asc`, append([]any{true, n.ts(n.now().Add(-n.deadAfter()))}, fargs...)...)
	if err != nil {
		return nil, err
	}
	var revived []*Execution
	var errs []error
	for _, e := range dead {
		now := n.now()
		k, err := n.reschedule(ctx, e, now, e.LastSuccess, now, e.ConsecutiveFailures+1)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if k == 1 {
			revived = append(revived, e)
		}
	}
	return revived, errors.Join(errs...)
}

package scheduler

import (
	"context"
	"fmt"
	"strings"
)

// State selects executions by what they are doing.
type State uint8

const (
	All     State = iota // every execution
	Due                  // unpicked, with an execution time that has come
	Picked               // held by a scheduler: running or about to run
	Failing              // with consecutive failures
	Waiting              // unpicked, not due yet
)

// Filter selects the executions List returns.
type Filter struct {
	Task  string // Optional: only this task's; default all tasks
	State State  // Optional: default All
	Limit int    // Optional: at most this many; default 1000
}

// List returns the executions f selects in execution time order, judged
// by the database's clock. It is one SELECT.
func (c *Client) List(ctx context.Context, f Filter) ([]*Execution, error) {
	var where []string
	if f.Task != "" {
		where = append(where, `task_name = :task`)
	}
	switch f.State {
	case All:
	case Due:
		where = append(where, `picked = false AND execution_time <= @now`)
	case Picked:
		where = append(where, `picked = true`)
	case Failing:
		where = append(where, `consecutive_failures > 0`)
	case Waiting:
		where = append(where, `picked = false AND execution_time > @now`)
	default:
		return nil, fmt.Errorf("%w: Filter.State %d", ErrInvalidConfig, f.State)
	}
	if f.Limit < 0 {
		return nil, fmt.Errorf("%w: Filter.Limit %d: must not be negative", ErrInvalidConfig, f.Limit)
	}
	if f.Limit == 0 {
		f.Limit = 1000
	}
	q := `SELECT ` + columns + ` FROM {t}`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, ` AND `)
	}
	q += ` ORDER BY execution_time, task_name, task_instance LIMIT :n`
	stmt, err := c.cfg.d.Compile(c.cfg.expand(q), "", allParams...)
	if err != nil {
		return nil, err
	}
	rows, err := c.db.QueryContext(ctx, stmt.SQL, c.sql.args(stmt, vals{task: f.Task, n: f.Limit})...)
	if err != nil {
		return nil, c.cfg.wrap(ctx, c.db, "scheduler: list", err)
	}
	defer rows.Close()
	var out []*Execution
	for rows.Next() {
		e, err := c.cfg.scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, c.cfg.wrap(ctx, c.db, "scheduler: list", err)
	}
	return out, nil
}

// countDue counts the due unpicked executions of the scheduler's tasks.
func (s *Scheduler) countDue(ctx context.Context) (int64, error) {
	var n int64
	q := s.sql.due
	err := s.db.QueryRowContext(ctx, q.SQL, s.sql.args(q, vals{}, s.cfg.names...)...).Scan(&n)
	return n, err
}

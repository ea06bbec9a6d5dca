package scheduler

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/lockreg/lockreg/internal/dialect"
)

// maxBatchRows bounds the rows of one INSERT of ScheduleBatch, within every
// driver's placeholder limit.
const maxBatchRows = 500

// ScheduleBatch inserts an execution of each of insts due at at, skipping
// those whose task already has an execution with that id, and returns how
// many it inserted (db-scheduler's scheduleBatch). It is one INSERT per 500
// instances, in one transaction, and on PostgreSQL one notification. It
// checks every instance before any I/O and writes nothing if one is bad.
func (c *Client) ScheduleBatch(ctx context.Context, insts []Instance, at time.Time) (int, error) {
	return c.ScheduleBatchTx(ctx, nil, insts, at)
}

// ScheduleBatchTx is ScheduleBatch in the caller's transaction; nil tx is
// ScheduleBatch.
func (c *Client) ScheduleBatchTx(ctx context.Context, tx *sql.Tx, insts []Instance, at time.Time) (int, error) {
	if at.IsZero() {
		return 0, fmt.Errorf("%w: ScheduleBatch: zero execution time", ErrInvalidInstance)
	}
	rows := make([]any, 0, 5*len(insts))
	for _, inst := range insts {
		data, prio, err := c.encode(inst)
		if err != nil {
			return 0, err
		}
		rows = append(rows, inst.Task, inst.ID, data, c.cfg.bindTime(at), prio)
	}
	if len(insts) == 0 {
		return 0, nil
	}
	own := tx == nil
	if own && len(insts) > maxBatchRows {
		var err error
		if tx, err = c.db.BeginTx(ctx, nil); err != nil {
			return 0, c.cfg.wrap(ctx, c.db, "scheduler: schedule batch", err)
		}
		defer tx.Rollback()
	}
	q := c.on(tx)
	total := 0
	for len(rows) > 0 {
		chunk := rows[:min(len(rows), 5*maxBatchRows)]
		rows = rows[len(chunk):]
		n, err := c.insertRows(ctx, q, chunk)
		if err != nil {
			return 0, c.cfg.wrap(ctx, q, "scheduler: schedule batch", err)
		}
		total += n
	}
	if own && tx != nil {
		if err := tx.Commit(); err != nil {
			return 0, c.cfg.wrap(ctx, c.db, "scheduler: schedule batch", err)
		}
	}
	if total > 0 && c.wake != nil {
		c.wake(at)
	}
	return total, nil
}

// insertRows inserts rows of 5 values (task, instance, data, time,
// priority) in one statement and returns how many it inserted.
func (c *Client) insertRows(ctx context.Context, q querier, rows []any) (int, error) {
	s := c.cfg
	prio := `?`
	if !s.Priority {
		prio = `NULL`
	}
	n := len(rows) / 5
	row := `(?, ?, ?, ?, false, 1, ` + prio + `)`
	ins := `INSERT INTO ` + s.Table + ` (task_name, task_instance, task_data, execution_time, picked, version, priority) VALUES ` +
		strings.TrimSuffix(strings.Repeat(row+`, `, n), `, `)
	args := rows
	if !s.Priority {
		args = make([]any, 0, 4*n)
		for i := 0; i < len(rows); i += 5 {
			args = append(args, rows[i:i+4]...)
		}
	}
	var text string
	switch s.d.Name {
	case "postgres":
		ins += ` ON CONFLICT DO NOTHING RETURNING execution_time`
		text = `WITH i AS (` + ins + `) SELECT COUNT(*) FROM i`
		if !s.NoNotify {
			text = `WITH i AS (` + ins + `) SELECT (SELECT COUNT(*) FROM i), (SELECT COUNT(*) FROM (SELECT pg_notify(?, ` +
				`CAST(CAST(EXTRACT(EPOCH FROM MIN(execution_time)) * 1000 AS BIGINT) AS TEXT)) FROM i ` +
				`HAVING MIN(execution_time) <= now() + CAST(? AS BIGINT) * INTERVAL '1 microsecond') n)`
			args = append(args, s.channel(), dialect.Micros(s.PollInterval))
		}
	case "mysql":
		text = ins + ` ON DUPLICATE KEY UPDATE task_name = task_name`
	default:
		text = ins + ` ON CONFLICT DO NOTHING`
	}
	text = s.d.MustCompile(strings.ReplaceAll(text, "?", ":p"), "", "p").WithList(0)
	if s.d.Name != "postgres" {
		count, err := dialect.Count(q.ExecContext(ctx, text, args...))
		return int(count), err
	}
	var count int64
	var notified sql.NullInt64
	dst := []any{&count}
	if !s.NoNotify {
		dst = append(dst, &notified)
	}
	err := q.QueryRowContext(ctx, text, args...).Scan(dst...)
	return int(count), err
}

package scheduler

import (
	"context"
	"strconv"
	"strings"

	"github.com/lockreg/lockreg/internal/dialect"
)

// maxGuarded bounds the rows of one guarded statement: three parameters
// each stay well within every database's limit.
const maxGuarded = 500

// guarded runs head (a statement ending in WHERE) on the rows of es at the
// versions es hold, in one statement per maxGuarded rows, and returns the
// keys of the rows it changed. A batch of heartbeats, unpicks or removals
// is then one round trip, so its transaction holds its row locks briefly.
// MySQL cannot return the rows: it returns keys nil and the count.
func (s *Scheduler) guarded(ctx context.Context, q querier, head dialect.Query, es []*Execution) (map[execKey]bool, int, error) {
	var keys map[execKey]bool
	if s.cfg.d.Name != "mysql" {
		keys = make(map[execKey]bool, len(es))
	}
	total := 0
	for len(es) > 0 {
		part := es[:min(len(es), maxGuarded)]
		es = es[len(part):]
		in, args := s.inVersions(len(head.Names), part)
		args = append(s.sql.args(head, vals{}), args...)
		if keys == nil {
			n, err := dialect.Count(q.ExecContext(ctx, head.SQL+in, args...))
			if err != nil {
				return nil, 0, err
			}
			total += int(n)
			continue
		}
		n, err := s.readKeys(ctx, q, head.SQL+in+` RETURNING task_name, task_instance`, args, keys)
		if err != nil {
			return nil, 0, err
		}
		total += n
	}
	return keys, total, nil
}

// holding returns the keys of the rows of es still at the versions es
// hold: on MySQL, which of a heartbeat's rows are still this scheduler's.
func (s *Scheduler) holding(ctx context.Context, q querier, es []*Execution) (map[execKey]bool, error) {
	keys := make(map[execKey]bool, len(es))
	for len(es) > 0 {
		part := es[:min(len(es), maxGuarded)]
		es = es[len(part):]
		in, args := s.inVersions(0, part)
		if _, err := s.readKeys(ctx, q, `SELECT task_name, task_instance FROM `+s.cfg.Table+` WHERE `+in, args, keys); err != nil {
			return nil, err
		}
	}
	return keys, nil
}

// readKeys adds the (task_name, task_instance) rows of query to keys.
func (s *Scheduler) readKeys(ctx context.Context, q querier, query string, args []any, keys map[execKey]bool) (int, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var k execKey
		if err := rows.Scan(&k.task, &k.inst); err != nil {
			return 0, err
		}
		keys[k] = true
		n++
	}
	return n, rows.Err()
}

// inVersions returns the condition that a row is one of es at its version,
// its placeholders numbered after the statement's first after on
// PostgreSQL, and its arguments.
func (s *Scheduler) inVersions(after int, es []*Execution) (string, []any) {
	var b strings.Builder
	args := make([]any, 0, 3*len(es))
	for _, e := range es {
		args = append(args, e.Task, e.Instance, e.Version)
	}
	if s.cfg.d.Name == "mysql" { // as tuples does, for MariaDB
		b.WriteString(`(` + strings.TrimSuffix(strings.Repeat(`(task_name = ? AND task_instance = ? AND version = ?) OR `, len(es)), ` OR `) + `)`)
		return b.String(), args
	}
	b.WriteString(`(task_name, task_instance, version) IN (VALUES `)
	for i := range es {
		if i > 0 {
			b.WriteString(`, `)
		}
		if s.cfg.d.Name == "postgres" {
			k := after + 3*i
			b.WriteString(`(CAST($` + strconv.Itoa(k+1) + ` AS TEXT), CAST($` + strconv.Itoa(k+2) +
				` AS TEXT), CAST($` + strconv.Itoa(k+3) + ` AS BIGINT))`)
		} else {
			b.WriteString(`(?, ?, ?)`)
		}
	}
	b.WriteString(`)`)
	return b.String(), args
}

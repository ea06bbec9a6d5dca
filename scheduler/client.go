package scheduler

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/lockreg/lockreg/internal/dialect"
	"github.com/lockreg/lockreg/registry"
)

// Client schedules, reschedules, cancels and reads executions (db-scheduler's
// SchedulerClient); it runs nothing, so any process may use one, with or
// without a Scheduler. Create it with [NewClient]; a Scheduler embeds one.
// It is safe for concurrent use. Each call is one statement, and at most
// one more to tell why a Reschedule or Cancel matched no row.
type Client struct {
	db  *sql.DB
	cfg *settled
	sql *statements

	wake func(at time.Time) // the local scheduler's, if any: an execution is due at at
}

// NewClient returns a client of db's table configured by cfg, of which it
// reads Table, Dialect, TimeZone, Tasks, Priority, PollInterval and
// NoNotify. It does no I/O. It returns an error wrapping ErrInvalidConfig
// for a bad field, or ErrUnknownDialect when the driver is not recognised.
func NewClient(db *sql.DB, cfg Config) (*Client, error) {
	s, err := cfg.settle(db, false)
	if err != nil {
		return nil, err
	}
	return &Client{db: db, cfg: s, sql: s.compile()}, nil
}

// querier is a *sql.DB or the caller's *sql.Tx.
type querier = dialect.Querier

// Schedule inserts an execution of inst due at at. It returns an error
// wrapping ErrExists, having written nothing, when the task already has an
// execution with that id; ErrUnknownTask, ErrInvalidInstance or ErrData for
// bad input, before any I/O.
func (c *Client) Schedule(ctx context.Context, inst Instance, at time.Time) error {
	return c.ScheduleTx(ctx, nil, inst, at)
}

// ScheduleTx is Schedule in the caller's transaction tx, so that the
// execution exists only if tx commits; on PostgreSQL the wake-up
// notification goes out at that commit. A nil tx is Schedule.
func (c *Client) ScheduleTx(ctx context.Context, tx *sql.Tx, inst Instance, at time.Time) error {
	ok, err := c.insert(ctx, c.on(tx), inst, at)
	if err == nil && !ok {
		err = fmt.Errorf("%w: %s/%s", ErrExists, inst.Task, inst.ID)
	}
	return err
}

// ScheduleIfNotExists inserts an execution of inst due at at unless the
// task has one with that id, and reports whether it did.
func (c *Client) ScheduleIfNotExists(ctx context.Context, inst Instance, at time.Time) (bool, error) {
	return c.insert(ctx, c.db, inst, at)
}

// ScheduleRecurring inserts the execution of a RecurringStored task with
// schedule s stored in its data beside inst.Data, due at s's first time
// from now. It returns ErrExists when the instance exists, and an error
// wrapping ErrInvalidSchedule for Disabled or a nil s.
func (c *Client) ScheduleRecurring(ctx context.Context, inst Instance, s Schedule) error {
	if s == nil || s == Disabled {
		return fmt.Errorf("%w: ScheduleRecurring %s/%s: nil or disabled schedule", ErrInvalidSchedule, inst.Task, inst.ID)
	}
	st, err := storedOf(s, inst.Data)
	if err != nil {
		return err
	}
	inst.Data = st
	return c.Schedule(ctx, inst, s.Initial(time.Now()))
}

func (c *Client) on(tx *sql.Tx) querier {
	if tx == nil {
		return c.db
	}
	return tx
}

// encode checks inst and returns its data as JSON.
func (c *Client) encode(inst Instance) ([]byte, int, error) {
	if err := checkID("task name", inst.Task); err != nil {
		return nil, 0, err
	}
	if err := checkID("instance id", inst.ID); err != nil {
		return nil, 0, err
	}
	prio := inst.Priority
	t, known := c.cfg.tasks[inst.Task]
	if len(c.cfg.tasks) > 0 && !known {
		return nil, 0, fmt.Errorf("%w: %s", ErrUnknownTask, dialect.Quote(inst.Task))
	}
	if prio == 0 {
		prio = PriorityMedium
		if known {
			prio = t.priority
		}
	}
	data, err := json.Marshal(inst.Data)
	if err != nil {
		return nil, 0, fmt.Errorf("%w: %s/%s: %w", ErrData, inst.Task, inst.ID, err)
	}
	return data, prio, nil
}

func (c *Client) insert(ctx context.Context, q querier, inst Instance, at time.Time) (bool, error) {
	data, prio, err := c.encode(inst)
	if err != nil {
		return false, err
	}
	if at.IsZero() {
		return false, fmt.Errorf("%w: %s/%s: zero execution time", ErrInvalidInstance, inst.Task, inst.ID)
	}
	v := vals{task: inst.Task, inst: inst.ID, data: data, at: at, prio: prio}
	var n int64
	if c.cfg.d.Name == "postgres" {
		var notified sql.NullInt64
		dst := []any{&n}
		if !c.cfg.NoNotify {
			dst = append(dst, &notified)
		}
		err = q.QueryRowContext(ctx, c.sql.insert.SQL, c.sql.args(c.sql.insert, v)...).Scan(dst...)
	} else {
		n, err = dialect.Count(q.ExecContext(ctx, c.sql.insert.SQL, c.sql.args(c.sql.insert, v)...))
	}
	if err != nil {
		return false, c.cfg.wrap(ctx, q, "scheduler: schedule "+inst.Task+"/"+inst.ID, err)
	}
	if n > 0 && c.wake != nil {
		c.wake(at)
	}
	return n > 0, nil
}

// Reschedule moves an unpicked execution to at and, when inst.Data is not
// nil, replaces its data. It returns an error wrapping ErrNotFound when
// there is no such execution and ErrPicked when a scheduler holds it.
func (c *Client) Reschedule(ctx context.Context, inst Instance, at time.Time) error {
	return c.RescheduleTx(ctx, nil, inst, at)
}

// RescheduleTx is Reschedule in the caller's transaction; nil tx is
// Reschedule.
func (c *Client) RescheduleTx(ctx context.Context, tx *sql.Tx, inst Instance, at time.Time) error {
	if err := checkID("instance id", inst.ID); err != nil {
		return err
	}
	if at.IsZero() {
		return fmt.Errorf("%w: %s/%s: zero execution time", ErrInvalidInstance, inst.Task, inst.ID)
	}
	v := vals{task: inst.Task, inst: inst.ID, at: at}
	stmt := c.sql.reschedule
	if inst.Data != nil {
		data, err := json.Marshal(inst.Data)
		if err != nil {
			return fmt.Errorf("%w: %s/%s: %w", ErrData, inst.Task, inst.ID, err)
		}
		v.data, stmt = data, c.sql.rescheduleData
	}
	q := c.on(tx)
	n, err := dialect.Count(q.ExecContext(ctx, stmt.SQL, c.sql.args(stmt, v)...))
	if err == nil && n == 0 {
		err = c.whyNot(ctx, q, inst.Task, inst.ID)
	}
	if err == nil && c.wake != nil {
		c.wake(at)
	}
	return c.cfg.wrap(ctx, q, "scheduler: reschedule "+inst.Task+"/"+inst.ID, err)
}

// Cancel deletes an unpicked execution. It returns an error wrapping
// ErrNotFound when there is none and ErrPicked when a scheduler holds it.
func (c *Client) Cancel(ctx context.Context, task, id string) error {
	return c.CancelTx(ctx, nil, task, id)
}

// CancelTx is Cancel in the caller's transaction; nil tx is Cancel.
func (c *Client) CancelTx(ctx context.Context, tx *sql.Tx, task, id string) error {
	q := c.on(tx)
	n, err := dialect.Count(q.ExecContext(ctx, c.sql.cancel.SQL, c.sql.args(c.sql.cancel, vals{task: task, inst: id})...))
	if err == nil && n == 0 {
		err = c.whyNot(ctx, q, task, id)
	}
	return c.cfg.wrap(ctx, q, "scheduler: cancel "+task+"/"+id, err)
}

// whyNot tells ErrNotFound from ErrPicked after a statement on an unpicked
// row matched none.
func (c *Client) whyNot(ctx context.Context, q querier, task, id string) error {
	e, err := c.get(ctx, q, task, id)
	switch {
	case err != nil:
		return err
	case e.Picked:
		return fmt.Errorf("%w: %s/%s by %s", ErrPicked, task, id, dialect.Quote(e.PickedBy))
	}
	// Unpicked now: it was picked a moment ago and has been rescheduled.
	return fmt.Errorf("%w: %s/%s was picked during the call", ErrPicked, task, id)
}

// Get returns the execution, or an error wrapping ErrNotFound.
func (c *Client) Get(ctx context.Context, task, id string) (*Execution, error) {
	e, err := c.get(ctx, c.db, task, id)
	if err != nil {
		return nil, c.cfg.wrap(ctx, c.db, "scheduler: get "+task+"/"+id, err)
	}
	return e, nil
}

func (c *Client) get(ctx context.Context, q querier, task, id string) (*Execution, error) {
	e, err := c.cfg.scan(q.QueryRowContext(ctx, c.sql.get.SQL, c.sql.args(c.sql.get, vals{task: task, inst: id})...))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("%w: %s/%s", ErrNotFound, task, id)
	}
	return e, err
}

// wrap classifies a database error: nil, ctx's error, a sentinel of this
// package as it is, transient, ErrNoTable, or err as it is.
func (s *settled) wrap(ctx context.Context, q querier, what string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrNotFound) || errors.Is(err, ErrPicked):
		return err
	}
	if ctxErr := ctx.Err(); ctxErr != nil && !errors.Is(err, ctxErr) {
		return fmt.Errorf("%s: %w: %w", what, ctxErr, err)
	}
	if dialect.IsTransient(err) {
		return registry.Transient(fmt.Errorf("%s: %w", what, err))
	}
	if s.d.IsNoTable(ctx, q, err, s.Table) {
		return fmt.Errorf("%s: %w: table %s does not exist; create it with scheduler.CreateSchema or db-scheduler's DDL: %w",
			what, ErrNoTable, s.Table, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

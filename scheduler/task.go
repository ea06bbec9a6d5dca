package scheduler

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// RecurringInstance is the instance id of a recurring task whose schedule
// is in code, db-scheduler's RecurringTask.INSTANCE.
const RecurringInstance = "recurring"

// Priorities of db-scheduler's Priority class; any int16 is allowed.
const (
	PriorityLow    = 10
	PriorityMedium = 50
	PriorityHigh   = 90
)

// A Task is a named kind of work and what to do when one of its executions
// runs, fails or dies. Make one with [OneTime], [Recurring],
// [RecurringStored] or [Custom] and give it to Config.Tasks; the zero
// value is not usable.
type Task struct {
	name      string
	run       func(context.Context, *Execution) (Completion, error)
	recurring bool     // Recurring
	schedule  Schedule // Recurring: the schedule in code
	stored    bool     // RecurringStored: the schedule is in the data
	data      any      // Recurring: the data of its execution
	onFailure FailureHandler
	onDead    DeadHandler
	priority  int
}

// Name returns the task's name, its executions' task_name.
func (t Task) Name() string { return t.name }

// A TaskOption sets an optional property of a task.
type TaskOption func(*Task)

// OnFailure sets what happens after an execution of the task returns an
// error or panics. Defaults: RetryAfter(5 min) for one-time and custom
// tasks, the next time by the schedule for recurring ones, as in
// db-scheduler.
func OnFailure(h FailureHandler) TaskOption { return func(t *Task) { t.onFailure = h } }

// OnDead sets what happens to an execution of the task that is found dead
// (its scheduler stopped heartbeating). Default: ReviveNow.
func OnDead(h DeadHandler) TaskOption { return func(t *Task) { t.onDead = h } }

// WithPriority sets the priority written with the task's executions when
// Config.Priority is on. Defaults: PriorityHigh for recurring tasks,
// PriorityMedium for others, as in db-scheduler.
func WithPriority(p int) TaskOption { return func(t *Task) { t.priority = p } }

// WithData sets the data of a Recurring task's execution, encoded as JSON.
func WithData(v any) TaskOption { return func(t *Task) { t.data = v } }

// OneTime returns a task whose executions run once each: one that returns
// nil is deleted; one that fails is handled by the failure handler. Every
// execution has an instance id of its own, given at Schedule.
func OneTime(name string, run func(ctx context.Context, e *Execution) error, opts ...TaskOption) Task {
	t := Task{name: name, onFailure: RetryAfter(5 * time.Minute), priority: PriorityMedium,
		run: func(ctx context.Context, e *Execution) (Completion, error) { return Remove(), run(ctx, e) }}
	return t.with(opts)
}

// Recurring returns a task with one execution, instance "recurring", that
// runs by s: Start schedules it when it is missing, moves it when s gives
// another time than the stored one (db-scheduler's rules), and removes it
// when s is Disabled. After each execution, failed or not, the next is
// s.Next of its end. s must not be nil.
func Recurring(name string, s Schedule, run func(ctx context.Context, e *Execution) error, opts ...TaskOption) Task {
	t := Task{name: name, recurring: true, schedule: s, priority: PriorityHigh, onFailure: bySchedule}
	t.run = func(ctx context.Context, e *Execution) (Completion, error) {
		err := run(ctx, e)
		return nextBy(s, time.Now()), err
	}
	return t.with(opts)
}

// RecurringStored returns a recurring task whose executions each carry
// their own schedule in their data (db-scheduler's
// RecurringTaskWithPersistentSchedule): one execution per tenant, say,
// scheduled with [Client.ScheduleRecurring]. The data is a
// [StoredSchedule]; the handler reads its Data with Execution.Decode.
func RecurringStored(name string, run func(ctx context.Context, e *Execution) error, opts ...TaskOption) Task {
	t := Task{name: name, stored: true, priority: PriorityHigh, onFailure: bySchedule}
	t.run = func(ctx context.Context, e *Execution) (Completion, error) {
		err := run(ctx, e)
		s, serr := e.storedSchedule()
		if serr != nil {
			return Remove(), fmt.Errorf("%w (the execution is removed)", serr)
		}
		return nextBy(s, time.Now()), err
	}
	return t.with(opts)
}

// Custom returns a task whose handler decides what becomes of its
// execution (db-scheduler's CustomTask with its CompletionHandler): remove
// it, run it again later, or replace it with the next step of a job chain
// in one transaction. An error goes to the failure handler instead.
func Custom(name string, run func(ctx context.Context, e *Execution) (Completion, error), opts ...TaskOption) Task {
	t := Task{name: name, run: run, onFailure: RetryAfter(5 * time.Minute), priority: PriorityMedium}
	return t.with(opts)
}

func (t Task) with(opts []TaskOption) Task {
	for _, o := range opts {
		o(&t)
	}
	if t.onDead == nil {
		t.onDead = ReviveNow
	}
	return t
}

// check validates a task at Config.settle.
func (t *Task) check() error {
	if err := checkID("task name", t.name); err != nil {
		return err
	}
	if t.recurring && t.schedule == nil {
		return fmt.Errorf("%w: recurring task %q has a nil schedule", ErrInvalidSchedule, t.name)
	}
	if t.onFailure == nil {
		return fmt.Errorf("%w: task %q has a nil failure handler", ErrInvalidConfig, t.name)
	}
	if _, err := json.Marshal(t.data); err != nil {
		return fmt.Errorf("%w: task %q: %w", ErrData, t.name, err)
	}
	return nil
}

// nextBy is the completion that moves a recurring execution to the next
// time of s after done, or removes it when s has none.
func nextBy(s Schedule, done time.Time) Completion {
	next := s.Next(done)
	if next.IsZero() {
		return Remove()
	}
	return RescheduleAt(next)
}

package scheduler

import (
	"context"
	"math"
	"time"
)

// A Completion says what becomes of an execution once it has run: it is
// removed, rescheduled, or replaced by another. Make one with [Remove],
// [RescheduleAt], [RescheduleAfter] or [Replace]. Every completion is
// written only if the execution is still the one this scheduler picked (its
// version is unchanged); otherwise it is refused and nothing is written.
type Completion struct {
	op       op
	at       time.Time     // opReschedule with an absolute time
	after    time.Duration // opReschedule relative to the database's clock, when at is zero
	data     any
	hasData  bool
	next     Instance // opReplace
	nextTime time.Time
}

type op uint8

const (
	opRemove op = iota
	opReschedule
	opReplace
)

// Remove deletes the execution (db-scheduler's OnCompleteRemove).
func Remove() Completion { return Completion{op: opRemove} }

// RescheduleAt makes the execution due again at t, unpicked, with its data
// (db-scheduler's OnCompleteReschedule).
func RescheduleAt(t time.Time) Completion { return Completion{op: opReschedule, at: t} }

// RescheduleAfter makes the execution due again d after now by the
// database's clock, so that a retry delay does not depend on the host's.
func RescheduleAfter(d time.Duration) Completion {
	return Completion{op: opReschedule, after: max(d, 0)}
}

// WithData returns c with the execution's data replaced by v (encoded as
// JSON) when c reschedules it; it has no effect on other completions.
func (c Completion) WithData(v any) Completion {
	c.data, c.hasData = v, true
	return c
}

// Replace deletes the execution and schedules next at t in the same
// transaction (db-scheduler's OnCompleteReplace): the step of a job chain
// that schedules the following step. If next exists already it is left as
// it is, and the execution is still deleted.
func Replace(next Instance, t time.Time) Completion {
	return Completion{op: opReplace, next: next, nextTime: t}
}

// Failure is what a failure handler knows of a failed execution.
type Failure struct {
	// Execution is the execution as it was picked; ConsecutiveFailures
	// counts the failures before this one.
	Execution *Execution
	// Err is the handler's error, or one wrapping ErrPanic.
	Err error
	// Schedule is the recurring task's schedule; nil for other tasks.
	Schedule Schedule
}

// A FailureHandler decides what becomes of a failed execution. The
// completion it returns is recorded as a failure: last_failure is set and
// consecutive_failures incremented.
type FailureHandler func(ctx context.Context, f Failure) Completion

// RetryAfter retries a failed execution d after the failure, by the
// database's clock (db-scheduler's OnFailureRetryLater).
func RetryAfter(d time.Duration) FailureHandler {
	return func(context.Context, Failure) Completion { return RescheduleAfter(d) }
}

// Backoff retries a failed execution after initial × rate^n, where n is the
// number of failures before this one, capped at maxDelay when it is
// positive (db-scheduler's ExponentialBackoffFailureHandler, whose rate
// defaults to 1.5). A rate below 1 counts as 1.
func Backoff(initial time.Duration, rate float64, maxDelay time.Duration) FailureHandler {
	rate = max(rate, 1)
	return func(_ context.Context, f Failure) Completion {
		d := float64(initial) * math.Pow(rate, float64(f.Execution.ConsecutiveFailures))
		if maxDelay > 0 {
			d = min(d, float64(maxDelay))
		}
		d = min(d, 1<<62) // within time.Duration, far beyond any real delay
		return RescheduleAfter(time.Duration(d))
	}
}

// MaxRetries hands a failed execution to retry while it has failed fewer
// than n times in a row, counting this failure, and otherwise calls
// deadLetter (when not nil) and removes it (db-scheduler's
// MaxRetriesFailureHandler). deadLetter runs on the execution's goroutine
// before the removal is written; if the removal is refused it has run all
// the same.
func MaxRetries(n int, retry FailureHandler, deadLetter func(ctx context.Context, f Failure)) FailureHandler {
	return func(ctx context.Context, f Failure) Completion {
		if f.Execution.ConsecutiveFailures+1 < n {
			return retry(ctx, f)
		}
		if deadLetter != nil {
			deadLetter(ctx, f)
		}
		return Remove()
	}
}

// bySchedule moves a failed recurring execution to its schedule's next
// time, db-scheduler's default for recurring tasks.
func bySchedule(_ context.Context, f Failure) Completion {
	if f.Schedule == nil {
		return Remove()
	}
	return nextBy(f.Schedule, time.Now())
}

// A DeadHandler decides what becomes of an execution found dead: picked,
// with a heartbeat older than MissedHeartbeats × HeartbeatInterval by the
// database's clock. Its completion is recorded as a failure.
type DeadHandler func(ctx context.Context, e *Execution) Completion

// ReviveNow makes a dead execution due at once, so that a scheduler runs it
// again (db-scheduler's ReviveDeadExecution).
func ReviveNow(context.Context, *Execution) Completion { return RescheduleAfter(0) }

// CancelDead removes a dead execution (db-scheduler's CancelDeadExecution).
func CancelDead(context.Context, *Execution) Completion { return Remove() }

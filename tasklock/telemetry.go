package tasklock

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	tel "github.com/lockreg/lockreg/internal/telemetry"
)

// taskTel counts an executor's runs.
type taskTel struct{ runs metric.Int64Counter }

// newTaskTel returns the instruments of an executor recording with mp,
// nil if mp records nothing.
func newTaskTel(mp metric.MeterProvider) *taskTel {
	m := tel.Meter(mp, "github.com/lockreg/lockreg/tasklock")
	if m == nil {
		return nil
	}
	in := &tel.Instruments{M: m}
	t := &taskTel{runs: in.Counter("lockreg.task.runs", "{run}",
		"Executor.Run calls by task and outcome: ran, skipped (the lock was held elsewhere) or error (the lock could not be taken).")}
	if in.Err != nil {
		return nil // a bug the tests catch; the executor works without
	}
	return t
}

// run counts a run of task whose lock attempt returned err.
func (t *taskTel) run(ctx context.Context, task string, err error) {
	if t == nil {
		return
	}
	outcome := "ran"
	switch {
	case errors.Is(err, ErrLocked):
		outcome = "skipped"
	case err != nil:
		outcome = "error"
	}
	t.runs.Add(context.WithoutCancel(ctx), 1, metric.WithAttributeSet(attribute.NewSet(
		tel.Task.String(task), tel.Outcome.String(outcome))))
}

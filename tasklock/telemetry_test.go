package tasklock_test

import (
	"context"
	"testing"

	tel "github.com/lockreg/lockreg/internal/telemetry"
	"github.com/lockreg/lockreg/internal/telemetry/telemetrytest"
	"github.com/lockreg/lockreg/registry"
	"github.com/lockreg/lockreg/tasklock"
)

// Runs are counted by task and outcome with the registry's meter provider:
// one that ran, one skipped because the lock was held.
func TestRunsAreCountedByOutcome(t *testing.T) {
	m := telemetrytest.NewMetrics()
	e, err := tasklock.NewLocal(registry.WithMeterProvider(m.Provider))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	ctx := context.Background()
	if ran, err := e.Run(ctx, "report", func(context.Context) error { return nil }); !ran || err != nil {
		t.Fatalf("Run = %v, %v", ran, err)
	}
	held, err := e.TryLock(ctx, "report")
	if err != nil {
		t.Fatal(err)
	}
	if ran, err := e.Run(ctx, "report", func(context.Context) error { return nil }); ran || err != nil {
		t.Fatalf("Run of a held task = %v, %v", ran, err)
	}
	held.Unlock(ctx)
	task := tel.Task.String("report")
	for o, want := range map[string]int64{"ran": 1, "skipped": 1, "error": 0} {
		if n := m.Sum(t, "lockreg.task.runs", task, tel.Outcome.String(o)); n != want {
			t.Errorf("%s: %d runs, want %d", o, n, want)
		}
	}
}

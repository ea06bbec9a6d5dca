package leader_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lockreg/lockreg/internal/telemetry/telemetrytest"
	"github.com/lockreg/lockreg/leader"
	"github.com/lockreg/lockreg/registry"
	"github.com/lockreg/lockreg/registry/registrytest"
)

// Without an error handler the candidate logs to its registry's logger,
// with the role as the key, and logs attempts that keep failing once.
func TestFailedAttemptsAreLoggedOnceToTheRegistrysLogger(t *testing.T) {
	var buf telemetrytest.Buffer
	repo := &faulty{Repository: registrytest.NewMemory().NewClient(), acquire: func(_ context.Context, n int) error {
		if n <= 5 {
			return errors.New("no such table")
		}
		return nil
	}}
	a := newCandidate(t, newRegistry(t, repo, registry.WithLogger(buf.Logger())), "reports",
		leader.WithBusyWait(time.Millisecond))
	waitLead(t, a)
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 1 {
		t.Fatalf("%d records for 5 failed attempts, want 1:\n%s", len(lines), buf.String())
	}
	for _, want := range []string{"key=reports", "no such table", "level=ERROR"} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("record %q lacks %q", lines[0], want)
		}
	}
}

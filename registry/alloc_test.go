package registry_test

import (
	"context"
	"testing"

	"github.com/lockreg/lockreg/registry"
)

// An uncontended Lock and Unlock of a registry without telemetry allocates
// only the hold (doc.go's cost statement): no context, timer or backoff per
// call, nothing for moving the key out of the idle cache and back.
func TestAnUncontendedCycleAllocatesOnlyItsHold(t *testing.T) {
	l := newReg(t, registry.NewLocalRepository()).Obtain("k")
	ctx := context.WithValue(context.Background(), valueKey{}, 1)
	for name, cycle := range map[string]func(){
		"Lock":        func() { l.Lock(); l.Unlock() },
		"LockContext": func() { _ = l.LockContext(ctx); _ = l.UnlockContext(ctx) },
	} {
		// LockContext with values costs the wrapper of each statement's
		// bound (acquire and release).
		want := 1.0
		if name == "LockContext" {
			want = 3
		}
		if n := testing.AllocsPerRun(200, cycle); n > want {
			t.Errorf("%s: %v allocations per cycle, want at most %v", name, n, want)
		}
	}
}

package main

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// The example runs briefly: each tick that appears in the output is run by
// exactly one scheduler, and some are.
func TestExampleEachTickRunsOnce(t *testing.T) {
	var out syncBuffer
	const ticks = 3
	if err := run(context.Background(), &out, filepath.Join(t.TempDir(), "scheduled.db"), time.Second, ticks); err != nil {
		t.Fatal(err)
	}
	text := out.b.String()
	t.Log("\n" + text)
	runs := map[string]int{}
	lines := strings.Split(strings.TrimSpace(text), "\n")
	if len(lines) != 2*ticks {
		t.Fatalf("%d lines, want %d", len(lines), 2*ticks)
	}
	for _, line := range lines {
		tick := strings.SplitN(line, ":", 2)[0]
		runs[tick] += 0
		if strings.Contains(line, "runs the report") {
			runs[tick]++
		}
	}
	for tick, n := range runs {
		if n != 1 {
			t.Errorf("%s ran %d times, want once", tick, n)
		}
	}
	if len(runs) == 0 {
		t.Fatalf("no tick ran:\n%s", text)
	}
}

package main

import (
	"path/filepath"
	"strings"
	"sync"
	"testing"
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

// The example's output shows each critical section as a holds/releases
// pair: a "holds" line is always followed by the same instance's release.
func TestExampleInstancesTakeTurns(t *testing.T) {
	var out syncBuffer
	if err := run(&out, "sqlite:"+filepath.Join(t.TempDir(), "basic.db"), 3); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.b.String()), "\n")
	if len(lines) != 12 {
		t.Fatalf("got %d lines, want 12:\n%s", len(lines), out.b.String())
	}
	for i := 0; i < len(lines); i += 2 {
		holder := strings.Fields(lines[i])[0]
		if !strings.Contains(lines[i], "holds") || lines[i+1] != holder+" releases it" {
			t.Fatalf("lines %d-%d are not one critical section:\n%s\n%s", i, i+1, lines[i], lines[i+1])
		}
	}
}

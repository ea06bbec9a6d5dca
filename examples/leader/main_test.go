package main

import (
	"context"
	"fmt"
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

// The example runs three terms of two report runs each on SQLite: each
// term is one instance leading, running the report only there, with a
// greater token than the term before, and yielding (the last one shuts
// down).
func TestExampleRunsTheReportOnlyOnTheLeader(t *testing.T) {
	const terms, runs = 3, 2
	var out syncBuffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dsn := "file:" + filepath.Join(t.TempDir(), "leader.db") + "?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)"
	if err := run(ctx, &out, "sqlite", dsn, terms, runs, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	text := out.b.String()
	t.Log("\n" + text)
	lines := strings.Split(strings.TrimSpace(text), "\n")
	if len(lines) != terms*(runs+2) {
		t.Fatalf("%d lines, want %d", len(lines), terms*(runs+2))
	}
	var prev int64
	for term := range terms {
		block := lines[term*(runs+2) : (term+1)*(runs+2)]
		var name string
		var token int64
		var n int
		if _, err := fmt.Sscanf(block[0], "%s leads (term %d, token %d)", &name, &n, &token); err != nil || n != term+1 {
			t.Fatalf("term %d begins with %q", term+1, block[0])
		}
		if token <= prev {
			t.Errorf("term %d has token %d, not greater than %d", term+1, token, prev)
		}
		prev = token
		for _, line := range block[1 : runs+1] {
			if want := fmt.Sprintf("%s runs the report (token %d)", name, token); line != want {
				t.Errorf("term %d: %q, want %q", term+1, line, want)
			}
		}
		why := "yielded"
		if term == terms-1 {
			why = "shut down"
		}
		if want := name + " stops leading: " + why; block[runs+1] != want {
			t.Errorf("term %d ends with %q, want %q", term+1, block[runs+1], want)
		}
	}
}

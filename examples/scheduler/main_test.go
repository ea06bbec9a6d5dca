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

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// The example's output shows each one-time execution and each step of
// each order run once, and recurring reports with versions that only grow.
func TestExampleRunsEachExecutionOnceAndTheChainInOrder(t *testing.T) {
	var out syncBuffer
	const orders = 3
	if err := run(context.Background(), &out, filepath.Join(t.TempDir(), "scheduler.db"), orders, time.Second); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	t.Log("\n" + text)
	count := map[string]int{}
	var order []string
	reports := 0
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		_, what, ok := strings.Cut(line, ": ")
		if !ok {
			t.Fatalf("line %q", line)
		}
		if strings.HasPrefix(what, "report") {
			reports++
			continue
		}
		count[what]++
		order = append(order, what)
	}
	want := []string{"send-reminder to ada@example.com"}
	for _, id := range []string{"order-1", "order-2", "order-3"} {
		want = append(want, "ship "+id)
	}
	for _, w := range want {
		if count[w] != 1 {
			t.Errorf("%q ran %d times, want once", w, count[w])
		}
	}
	for _, id := range []string{"order-1", "order-2", "order-3"} {
		charge, ship := -1, -1
		for i, w := range order {
			if strings.HasPrefix(w, "charge "+id) {
				charge = i
			}
			if w == "ship "+id {
				ship = i
			}
		}
		if charge < 0 || ship < charge {
			t.Errorf("%s: charged at %d, shipped at %d", id, charge, ship)
		}
	}
	if reports == 0 {
		t.Error("no recurring report")
	}
}

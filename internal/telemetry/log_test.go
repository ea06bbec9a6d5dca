package telemetry

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// A kind of failure is let through once per interval, and the next one let
// through counts the ones held back.
func TestLimiterLetsOnePerIntervalThroughAndCountsTheRest(t *testing.T) {
	now := time.Unix(0, 0)
	l := Limiter{Interval: time.Second, now: func() time.Time { return now }}
	if ok, held := l.Allow("renew"); !ok || held != 0 {
		t.Fatalf("first: %v, %d; want true, 0", ok, held)
	}
	for range 3 {
		now = now.Add(100 * time.Millisecond)
		if ok, _ := l.Allow("renew"); ok {
			t.Fatal("a repeat within the interval was let through")
		}
	}
	if ok, _ := l.Allow("acquire"); !ok {
		t.Fatal("another kind was held back")
	}
	now = now.Add(time.Second)
	if ok, held := l.Allow("renew"); !ok || held != 3 {
		t.Fatalf("after the interval: %v, %d; want true, 3", ok, held)
	}
}

// Repeated logs the first failure with the logger's fields, and holds back
// the repeats that follow within RepeatInterval.
func TestRepeatedLogsTheFirstFailureWithTheFields(t *testing.T) {
	var buf bytes.Buffer
	g := NewLogger(slog.New(slog.NewTextHandler(&buf, nil)), LogBackend, "sqlite", LogRegion, "r1")
	for range 5 {
		g.Repeated("acquire", "retrying", errors.New("boom"), LogKey, "k")
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 1 {
		t.Fatalf("%d records, want 1:\n%s", len(lines), buf.String())
	}
	for _, want := range []string{"key=k", "backend=sqlite", "region=r1", "err=boom", "level=ERROR"} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("record %q lacks %q", lines[0], want)
		}
	}
}

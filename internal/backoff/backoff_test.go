package backoff

import (
	"context"
	"testing"
	"time"
)

func TestDelaysDoubleWithinEqualJitterUpToTheCap(t *testing.T) {
	b := New(10*time.Millisecond, 80*time.Millisecond)
	for i, nominal := range []time.Duration{10, 20, 40, 80, 80, 80} {
		nominal *= time.Millisecond
		if d := b.Next(); d < nominal/2 || d > nominal {
			t.Fatalf("delay %d = %v, want within [%v, %v]", i, d, nominal/2, nominal)
		}
	}
}

func TestResetStartsAgainFromTheBase(t *testing.T) {
	b := New(10*time.Millisecond, time.Second)
	for range 5 {
		b.Next()
	}
	b.Reset()
	if d := b.Next(); d > 10*time.Millisecond {
		t.Fatalf("first delay after Reset = %v, want at most 10ms", d)
	}
}

func TestACapBelowTheBaseIsTheBase(t *testing.T) {
	b := New(time.Second, time.Millisecond)
	for range 3 {
		if d := b.Next(); d < 500*time.Millisecond || d > time.Second {
			t.Fatalf("delay %v, want within [500ms, 1s]", d)
		}
	}
}

func TestSleepEndsEarlyWhenStopCloses(t *testing.T) {
	stop := make(chan struct{})
	close(stop)
	if Sleep(context.Background(), time.Hour, stop) {
		t.Fatal("Sleep reported a full sleep though stop was closed")
	}
}

func TestSleepEndsEarlyWhenTheContextIsDone(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if Sleep(ctx, time.Hour, nil) {
		t.Fatal("Sleep reported a full sleep though ctx was done")
	}
}

func TestSleepSleeps(t *testing.T) {
	if !Sleep(context.Background(), time.Millisecond, nil) {
		t.Fatal("Sleep reported an early end")
	}
}

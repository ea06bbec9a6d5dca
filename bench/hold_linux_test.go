package main

import (
	"syscall"
	"testing"
	"time"
)

func TestAHoldInterruptedBySignalsLastsItsWholeDuration(t *testing.T) {
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // SIGURG is the runtime's own preemption signal: harmless
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
				_ = syscall.Kill(syscall.Getpid(), syscall.SIGURG)
				time.Sleep(100 * time.Microsecond)
			}
		}
	}()
	defer func() { close(stop); <-done }()
	for range 20 {
		const d = 5 * time.Millisecond
		start := time.Now()
		holdFor(d)
		if got := time.Since(start); got < d {
			t.Fatalf("holdFor(%v) returned after %v", d, got)
		}
	}
}

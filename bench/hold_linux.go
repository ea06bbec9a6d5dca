package main

import (
	"syscall"
	"time"
)

// holdFor keeps the contended key for d, standing for a holder's work. It
// does not use time.Sleep: the Go runtime waits for its timers in
// epoll_wait, whose timeout is in whole milliseconds (runtime.netpoll
// rounds a wait under 1 ms up to 1 ms), so a sleep of 1 ms ends about 1 ms
// after the last network event the process handled during it. A
// contestant whose releaser gets its replies while the next holder holds
// (a hand-off announced before the release's own reply) thus held longer:
// 1.31 ms against floor-handoff's 1.13 at -hold 1ms (docs/benchmarks.md).
// nanosleep blocks this goroutine's thread (the runtime's sysmon gives
// its P to another thread meanwhile) and ends after the kernel's timer
// slack (50 µs by default) and the thread's wake-up, whatever the rest of
// the process does: holds of 1 ms measured 1.07-1.08 ms for every
// contestant. A signal ends nanosleep early (the runtime's preemption
// signals do), so it sleeps again for what is left.
func holdFor(d time.Duration) {
	end := time.Now().Add(d)
	for left := d; left > 0; left = time.Until(end) {
		ts := syscall.NsecToTimespec(int64(left))
		if err := syscall.Nanosleep(&ts, nil); err != nil && err != syscall.EINTR {
			time.Sleep(time.Until(end))
			return
		}
	}
}

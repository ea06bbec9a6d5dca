package jdbc

import (
	"context"
	"time"
)

// SetListenerSleep makes r's listener wait between attempts with f instead
// of a timer. It must be called before the listener starts (the first
// Notify).
func SetListenerSleep(r *LockRepository, f func(ctx context.Context, d time.Duration) bool) {
	r.listeners.sleep = f
}

// ListenerDelays are the bounds of the listener's backoff.
const ListenerMinDelay, ListenerMaxDelay = listenMinDelay, listenMaxDelay

// GroupCommitsWaiting returns how many takes and expiries of r wait for a
// group commit.
func GroupCommitsWaiting(r *LockRepository) int {
	n := 0
	if r.takes != nil {
		n += r.takes.Waiting()
	}
	if r.expiries != nil {
		n += r.expiries.Waiting()
	}
	return n
}

// Announce passes payload to r's listener as if it had arrived on its
// channel.
func Announce(r *LockRepository, payload string) { r.listeners.wake(payload) }

//go:build chaos

package chaos

import (
	"testing"
	"time"

	"github.com/lockreg/lockreg/internal/testharness"
)

// proxy is the TCP proxy that cuts a registry off from its server.
type proxy = testharness.Proxy

// startProxy listens on 127.0.0.1:0, forwarding to target, until t ends.
func startProxy(t *testing.T, target string) *proxy { return testharness.StartProxy(t, target) }

// cutAfterRenewal waits until a keep-alive through p has renewed the lease
// (expires, read directly, changes within two TTLs), then cuts p and waits
// for the holder's done to close, within three TTLs.
func cutAfterRenewal(t *testing.T, p *proxy, ttl time.Duration, done <-chan struct{}, expires func() int64) {
	t.Helper()
	first := expires()
	for deadline := time.Now().Add(2 * ttl); expires() == first; {
		if time.Now().After(deadline) {
			t.Fatal("the keep-alive did not renew the lease through the proxy")
		}
		time.Sleep(50 * time.Millisecond)
	}
	p.Cut()
	select {
	case <-done:
	case <-time.After(3 * ttl):
		t.Fatal("Done did not close after the partition")
	}
}

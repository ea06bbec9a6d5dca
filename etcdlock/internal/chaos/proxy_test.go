package chaos

import (
	"testing"

	"github.com/lockreg/lockreg/internal/testharness"
)

// proxy is the TCP proxy that cuts a client off from an etcd member.
type proxy = testharness.Proxy

// startProxy listens on 127.0.0.1:0, forwarding to target, until t ends.
func startProxy(t *testing.T, target string) *proxy { return testharness.StartProxy(t, target) }

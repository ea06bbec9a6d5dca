package clustertest

import (
	"testing"

	"github.com/lockreg/lockreg/internal/testharness"
)

// Four perkey routers, each a child process, handle 10 000 messages of 50
// keys as competing consumers, each handler behind lockmw.PerKey on a
// registry of its own (no keep-alive: the middleware renews), guarding its
// work by a fence in PostgreSQL; a few handlers run 2.5 TTLs, ignoring
// their context. One router is killed with SIGKILL at 30 %, another paused
// with SIGSTOP at 50 % while it runs a long handler, whose key the test
// process takes once its lease has expired. No two runs of a key the
// middleware acked overlap (by the guard, and by the database's times of
// their steps), no run that found a newer holder in the guard was acked or
// went unreported as a lost lease, the paused run was nacked although its
// handler returned nil, some long handlers outlived the TTL and were acked,
// and every message was acked.
func TestPerKeyClusterNeverOverlapsAKeyAndNacksStaleRunsDespiteAKilledAndAPausedMember(t *testing.T) {
	test := testharness.PerKeyTest{Messages: 10_000, Keys: 50}
	if testing.Short() {
		test.Messages = 1000
	}
	test.Run(t, testharness.DefaultCluster(locks))
}

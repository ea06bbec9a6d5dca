package clustertest

import (
	"testing"

	"github.com/lockreg/lockreg/internal/testharness"
)

// Four aggregator routers, each a process of its own, consume one input
// topic of 2 000 groups of 10 messages, shuffled and with about 15 %
// duplicate deliveries; one router is killed with SIGKILL once 30 % of the
// groups are released. Every group must be released with one output UUID,
// in exactly one output row when the children's store is a sqlstore.Outbox
// (testharness's transactionalOutput), and otherwise at least once (a
// release interrupted between its publication and the group's completion
// is published again with the same UUID; those repeats are counted); each
// output must hold the group's 10 messages in sequence order, and no
// delivery may be left unacked. Messages that reach a completed group
// afterwards must go to the discard topic as "late", and redeliveries of
// messages the groups released must change nothing. Both group locks run:
// the registry's leases and the store's row locks.
func TestAggregatorClusterReleasesEveryGroupOnceAndDiscardsLateMessagesDespiteAKilledMember(t *testing.T) {
	test := testharness.AggregatorTest{Groups: 2000, Size: 10, Late: 100}
	if testing.Short() {
		test.Groups, test.Late = 200, 20
	}
	testharness.ForEachGroupLock(t, testharness.DefaultCluster(locks),
		[]testharness.GroupLock{testharness.RegistryLock, testharness.StoreLock}, test.Run)
}

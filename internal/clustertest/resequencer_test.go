package clustertest

import (
	"testing"

	"github.com/lockreg/lockreg/internal/testharness"
)

// Four resequencer routers (ReleasePartialSequences), each a process of
// its own, consume one input topic of 500 groups of 40 messages, shuffled,
// with about 15 % duplicate deliveries (a UUID published again) and 2 % of
// the messages with a twin (a second message with the same sequence number
// and a UUID of its own); one router is killed with SIGKILL once half of
// the deliveries were acked. Every group must come out complete and in
// order: its output rows, in offset order and without the repeats of an
// output UUID seen before (a run whose publication was interrupted before
// it was recorded is published again with the same UUIDs and payloads,
// unless the children's store is a sqlstore.Outbox: see testharness's
// transactionalOutput), carry sequence numbers 1 to 40 in strictly
// increasing order, each with the payload of the input message of that
// number or of its twin, and no delivery may be left unacked.
//
// The two kinds of duplicates end differently. A duplicate delivery is
// recognised by the group store by its UUID and acked without output or
// discard, also after the group completed. Of a message and its twin, the
// one that reaches the group first is kept and the other is discarded: as
// "duplicate" while the group holds the first unreleased, as "late" once
// that number was released. So the discard topic must hold exactly the
// twins that lost and the late messages published after every group
// completed (a new message for a number of each of some groups, "late").
// Both group locks run: the registry's leases and the store's row locks.
func TestResequencerClusterReleasesEveryGroupCompleteAndInOrderDespiteAKilledMember(t *testing.T) {
	test := testharness.ResequencerTest{Groups: 500, Size: 40, Late: 100}
	if testing.Short() {
		test.Groups, test.Late = 50, 20
	}
	testharness.ForEachGroupLock(t, testharness.DefaultCluster(locks),
		[]testharness.GroupLock{testharness.RegistryLock, testharness.StoreLock}, test.Run)
}

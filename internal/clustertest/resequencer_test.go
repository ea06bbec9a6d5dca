package clustertest

import (
	"strconv"
	"testing"
	"time"

	"github.com/lockreg/lockreg/resequencer"
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
// unless the children's store is a sqlstore.Outbox: see transactionalOutput),
// carry sequence numbers 1 to 40 in strictly
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
func TestResequencerClusterReleasesEveryGroupCompleteAndInOrderDespiteAKilledMember(t *testing.T) {
	forEachGroupLock(t, defaultCluster(kindResequencer), func(t *testing.T, cfg clusterConfig) {
		db, dsn := requirePostgres(t)
		groups, size, lateN := 500, 40, 100
		if testing.Short() {
			groups, lateN = 50, 20
		}
		total := groups * size
		w := newWorkload(t, groups, size, 0.15, 0.02)
		c := startCluster(t, db, dsn, cfg)
		c.publish(w.deliveries)
		t.Logf("%v: published %d deliveries of %d messages (%d duplicates)", c.elapsed(), len(w.deliveries), total, w.duplicates)

		// With shuffled input a group releases little until most of its
		// messages arrived (30 % of the messages are released only once some
		// 90 % of the deliveries were handled), so the kill comes when half of
		// the deliveries were acked, while runs of every length are released.
		released := func() int { return c.count(`SELECT COUNT(DISTINCT uuid) FROM ` + c.table(c.output)) }
		c.waitFor("half of the deliveries acked", 3*time.Minute,
			c.progress("messages", total, released, func(_, pending int) bool { return 2*pending <= c.published }))
		c.kill(0)
		c.waitFor("every message released", 3*time.Minute,
			c.progress("messages", total, released, func(n, _ int) bool { return n == total }))
		finished := c.elapsed()

		late, msgs := w.late(lateN, func(string) int { return 1 + w.rng.IntN(size) })
		c.publish(msgs)
		c.waitForLate(late)
		c.stop()
		handled, failed := c.logChildren()

		strict := transactionalOutput
		if c.outbox() != strict {
			t.Errorf("the children report outbox stores: %t, want %t", c.outbox(), strict)
		}
		r := &reporter{t: t}
		outputs := map[string][]row{}
		rows := c.rows(c.output)
		for _, o := range rows {
			key := o.Metadata[correlationKey]
			outputs[key] = append(outputs[key], o)
		}
		repeats := 0
		discards := lateDiscards(late)
		for _, key := range w.keys {
			outs := outputs[key]
			delete(outputs, key)
			n, released := checkSequence(r, key, w.msgs[key], w.twins[key], outs)
			repeats += n
			for seq, twin := range w.twins[key] {
				loser := twin
				if released[seq] == twin.ID {
					loser = w.msgs[key][seq-1]
				}
				discards = append(discards, discardWant{loser, []string{"duplicate", "late"}})
			}
		}
		for key, outs := range outputs {
			r.errorf("%d outputs for %q, which is no group of the input", len(outs), key)
		}
		if strict && repeats > 0 {
			r.errorf("%d output rows repeat an earlier output's UUID with an outbox store, want none", repeats)
		}
		if strict && len(rows) != total {
			r.errorf("%d output rows with an outbox store, want exactly %d", len(rows), total)
		}
		r.done()
		discardRepeats := checkDiscards(t, c, resequencer.DiscardReasonKey, discards)

		mode := "at least once: repeats of an output UUID allowed"
		if strict {
			mode = "outbox: exactly once"
		}
		t.Logf("resequencer cluster (%s): %d deliveries (%d duplicates) of %d messages and %d twins in %d groups, "+
			"all released after %v; %d output rows, %d of them repeats of an earlier UUID; %d twins and %d late messages "+
			"discarded (%d discarded again), %d redeliveries of released messages ignored; %d handler calls succeeded, "+
			"%d failed and were redelivered; total %v",
			mode, len(w.deliveries), w.duplicates, total, w.twinCount, groups, finished, len(rows), repeats,
			w.twinCount, len(late), discardRepeats, len(msgs)-len(late), handled, failed, c.elapsed())
	})
}

// checkSequence checks the outputs of group key, in offset order: after
// dropping the repeats of a UUID seen before (which must carry the same
// sequence number and payload), the sequence numbers are 1 to len(want),
// strictly increasing, each output carrying the payload of the input
// message of its number, or of that message's twin, under a UUID of its
// own. It returns the number of repeats and the input UUID released for
// each sequence number.
func checkSequence(r *reporter, key string, want []payload, twins map[int]payload, outs []row) (repeats int, released map[int]string) {
	r.t.Helper()
	type first struct {
		seq     int
		payload string
	}
	seen := map[string]first{} // by output UUID
	released = map[int]string{}
	var seqs []int
	for _, o := range outs {
		seq, err := strconv.Atoi(o.Metadata[sequenceKey])
		if err != nil || seq < 1 || seq > len(want) {
			r.errorf("group %s: output %s has %s %q", key, o.UUID, sequenceKey, o.Metadata[sequenceKey])
			return repeats, released
		}
		if f, ok := seen[o.UUID]; ok {
			if f.seq != seq || f.payload != string(o.Payload) {
				r.errorf("group %s: output UUID %s carries sequence number %d with %s, and %d with %s",
					key, o.UUID, f.seq, f.payload, seq, o.Payload)
			}
			repeats++
			continue
		}
		seen[o.UUID] = first{seq, string(o.Payload)}
		if n := len(seqs); n > 0 && seq <= seqs[n-1] {
			r.errorf("group %s: sequence number %d released after %d (so far %v)", key, seq, seqs[n-1], seqs)
			return repeats, released
		}
		seqs = append(seqs, seq)
		p, err := parsePayload(o.Payload)
		twin, hasTwin := twins[seq]
		if err != nil || p != want[seq-1] && (!hasTwin || p != twin) {
			r.errorf("group %s: output %s (sequence number %d) carries %s, want %+v (%v)", key, o.UUID, seq, o.Payload, want[seq-1], err)
		}
		released[seq] = p.ID
		if o.UUID == p.ID {
			r.errorf("group %s: output of sequence number %d kept its input UUID %s", key, seq, o.UUID)
		}
	}
	if len(seqs) != len(want) {
		r.errorf("group %s: released %d of %d messages: %v", key, len(seqs), len(want), seqs)
	}
	return repeats, released
}

package testharness

import (
	"strconv"
	"testing"

	"github.com/lockreg/lockreg/resequencer"
)

// ResequencerTest is the cluster test of the resequencer
// (ReleasePartialSequences): the test's routers consume an input topic of
// Groups groups of Size messages each, shuffled, with about 15 % duplicate
// deliveries (a UUID published again) and 2 % of the messages with a twin
// (a second message with the same sequence number and a UUID of its own);
// one router is killed with SIGKILL once half of the deliveries were
// acked. Every group must come out complete and in order (sequence numbers
// 1 to Size, strictly increasing, each with the payload of the input
// message of that number or of its twin, after dropping repeats of an
// output UUID, of which an outbox store allows none), and no delivery may
// be left unacked. The discard topic must hold exactly the twins that lost
// ("duplicate" or "late") and Late messages published after every group
// completed ("late").
type ResequencerTest struct {
	Groups, Size, Late int
}

// Run runs the test on a cluster of cfg.
func (rt ResequencerTest) Run(t *testing.T, cfg ClusterConfig) {
	groups, total := rt.Groups, rt.Groups*rt.Size
	g := startGroupTest(t, cfg, kindResequencer, groups, rt.Size, 0.02)
	w, c := g.w, g.c

	// With shuffled input a group releases little until most of its
	// messages arrived (30 % of the messages are released only once some
	// 90 % of the deliveries were handled), so the kill comes when half of
	// the deliveries were acked, while runs of every length are released.
	released := func() int { return c.count(`SELECT COUNT(DISTINCT uuid) FROM ` + c.table(c.output)) }
	finished := g.release("messages", total, released, "half of the deliveries acked",
		func(_, pending int) bool { return 2*pending <= c.published })

	late, msgs, handled, failed := g.finish(rt.Late)

	strict, rows, outputs := g.outputs()
	r := &reporter{t: t}
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

	t.Logf("resequencer cluster (%s): %d deliveries (%d duplicates) of %d messages and %d twins in %d groups, "+
		"all released after %v; %d output rows, %d of them repeats of an earlier UUID; %d twins and %d late messages "+
		"discarded (%d discarded again), %d redeliveries of released messages ignored; %d handler calls succeeded, "+
		"%d failed and were redelivered; total %v",
		deliveryMode(strict), len(w.deliveries), w.duplicates, total, w.twinCount, groups, finished, len(rows), repeats,
		w.twinCount, len(late), discardRepeats, len(msgs)-len(late), handled, failed, c.elapsed())
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

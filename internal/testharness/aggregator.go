package testharness

import (
	"encoding/json"
	"testing"

	"github.com/lockreg/lockreg/aggregator"
)

// AggregatorTest is the cluster test of the aggregator: the test's
// routers consume an input topic of Groups groups of Size messages each,
// shuffled and with about 15 % duplicate deliveries; one router is killed
// with SIGKILL once 30 % of the groups are released. Every group must be
// released with one output UUID, in exactly one output row when the
// children's store is a sqlstore.Outbox (transactionalOutput), and
// otherwise at least once (repeats of a release interrupted between its
// publication and the group's completion are counted); each output must
// hold the group's messages in sequence order, and no delivery may be left
// unacked. Then Late messages for completed groups must go to the discard
// topic as "late", and as many redeliveries of messages the groups
// released must change nothing.
type AggregatorTest struct {
	Groups, Size, Late int
}

// Run runs the test on a cluster of cfg.
func (a AggregatorTest) Run(t *testing.T, cfg ClusterConfig) {
	groups := a.Groups
	g := startGroupTest(t, cfg, kindAggregator, groups, a.Size, 0)
	w, c := g.w, g.c

	released := func() int {
		return c.count(`SELECT COUNT(DISTINCT metadata->>'` + correlationKey + `') FROM ` + c.table(c.output))
	}
	finished := g.release("groups", groups, released, "30 % of the groups released",
		func(n, _ int) bool { return 10*n >= 3*groups })

	late, msgs, handled, failed := g.finish(a.Late)

	strict, rows, outputs := g.outputs()
	r := &reporter{t: t}
	repeats := 0
	for _, key := range w.keys {
		outs := outputs[key]
		delete(outputs, key)
		if len(outs) == 0 {
			r.errorf("group %s was not released", key)
			continue
		}
		ids := map[string]bool{}
		for _, o := range outs {
			ids[o.UUID] = true
			checkAggregate(r, key, w.msgs[key], o)
		}
		if len(ids) != 1 {
			r.errorf("group %s was released %d times: output UUIDs %v", key, len(ids), keysOf(ids))
		}
		repeats += len(outs) - len(ids)
		if strict && len(outs) != 1 {
			r.errorf("group %s: %d output rows with an outbox store, want exactly one", key, len(outs))
		}
	}
	for key, outs := range outputs {
		r.errorf("%d outputs for %q, which is no group of the input", len(outs), key)
	}
	if strict && len(rows) != groups {
		r.errorf("%d output rows with an outbox store, want exactly %d", len(rows), groups)
	}
	r.done()
	discardRepeats := checkDiscards(t, c, aggregator.DiscardReasonKey, lateDiscards(late))

	t.Logf("aggregator cluster (%s): %d deliveries (%d duplicates) of %d messages in %d groups, all released after %v; "+
		"%d output rows for %d groups, %d repeated output rows; %d late messages discarded (%d discarded again), "+
		"%d redeliveries of released messages ignored; %d handler calls succeeded, %d failed and were redelivered; total %v",
		deliveryMode(strict), len(w.deliveries), w.duplicates, groups*a.Size, groups, finished, len(rows), groups, repeats,
		len(late), discardRepeats, len(msgs)-len(late), handled, failed, c.elapsed())
}

// checkAggregate checks that the output o of group key holds the payloads
// of want, in sequence order, as aggregator.DefaultOutput makes it: a JSON
// array of the input payloads.
func checkAggregate(r *reporter, key string, want []payload, o row) {
	r.t.Helper()
	var elems []json.RawMessage
	if err := json.Unmarshal(o.Payload, &elems); err != nil {
		r.errorf("group %s: output %s is not a JSON array: %v: %s", key, o.UUID, err, o.Payload)
		return
	}
	if len(elems) != len(want) {
		r.errorf("group %s: output %s holds %d messages, want %d: %s", key, o.UUID, len(elems), len(want), o.Payload)
		return
	}
	for i, e := range elems {
		p, err := parsePayload(e)
		if err != nil || p != want[i] {
			r.errorf("group %s: output %s holds %s at %d, want %+v (%v)", key, o.UUID, e, i, want[i], err)
			return
		}
	}
}

// keysOf returns the keys of a set.
func keysOf(set map[string]bool) []string {
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	return out
}

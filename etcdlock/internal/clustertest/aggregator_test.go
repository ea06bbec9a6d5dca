package clustertest

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/lockreg/lockreg/aggregator"
)

// Four aggregator routers, each a process of its own, consume one input
// topic of 2 000 groups of 10 messages, shuffled and with about 15 %
// duplicate deliveries; one router is killed with SIGKILL once 30 % of the
// groups are released. Every group must be released with one output UUID,
// in exactly one output row when the children's store is a sqlstore.Outbox
// (transactionalOutput), and otherwise at least once (a release interrupted
// between its publication and the group's completion is published again
// with the same UUID; those repeats are counted); each output must hold
// the group's 10 messages in sequence order, and no delivery may be left
// unacked. Messages that reach a
// completed group afterwards must go to the discard topic as "late", and
// redeliveries of messages the groups released must change nothing.
func TestAggregatorClusterReleasesEveryGroupOnceAndDiscardsLateMessagesDespiteAKilledMember(t *testing.T) {
	forEachGroupLock(t, defaultCluster(kindAggregator), func(t *testing.T, cfg clusterConfig) {
		db, dsn := requirePostgres(t)
		groups, size, lateN := 200, 10, 20 // a tenth of the jdbc run's, as with -short there
		w := newWorkload(t, groups, size, 0.15, 0)
		c := startCluster(t, db, dsn, cfg)
		c.publish(w.deliveries)
		t.Logf("%v: published %d deliveries of %d messages (%d duplicates)", c.elapsed(), len(w.deliveries), groups*size, w.duplicates)

		released := func() int {
			return c.count(`SELECT COUNT(DISTINCT metadata->>'` + correlationKey + `') FROM ` + c.table(c.output))
		}
		c.waitFor("30 % of the groups released", 3*time.Minute,
			c.progress("groups", groups, released, func(n, _ int) bool { return 10*n >= 3*groups }))
		c.kill(0)
		c.waitFor("every group released", 3*time.Minute,
			c.progress("groups", groups, released, func(n, _ int) bool { return n == groups }))
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

		mode := "at least once: repeats of an output UUID allowed"
		if strict {
			mode = "outbox: exactly once"
		}
		t.Logf("aggregator cluster (%s): %d deliveries (%d duplicates) of %d messages in %d groups, all released after %v; "+
			"%d output rows for %d groups, %d repeated output rows; %d late messages discarded (%d discarded again), "+
			"%d redeliveries of released messages ignored; %d handler calls succeeded, %d failed and were redelivered; total %v",
			mode, len(w.deliveries), w.duplicates, groups*size, groups, finished, len(rows), groups, repeats,
			len(late), discardRepeats, len(msgs)-len(late), handled, failed, c.elapsed())
	})
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

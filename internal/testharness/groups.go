package testharness

import (
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
)

// groupTest is a cluster test of a group handler, the aggregator or the
// resequencer, under way: its workload, published on its cluster.
type groupTest struct {
	t *testing.T
	w *workload
	c *cluster
}

// startGroupTest starts a cluster of cfg whose children run kind and
// publishes a workload of groups of size messages, with duplicate
// deliveries at rate 0.15 and twins at twinRate.
func startGroupTest(t *testing.T, cfg ClusterConfig, kind string, groups, size int, twinRate float64) *groupTest {
	t.Helper()
	cfg.kind = kind
	db, dsn := requirePostgres(t)
	w := newWorkload(t, groups, size, 0.15, twinRate)
	c := startCluster(t, db, dsn, cfg)
	c.publish(w.deliveries)
	t.Logf("%v: published %d deliveries of %d messages (%d duplicates)", c.elapsed(), len(w.deliveries), groups*size, w.duplicates)
	return &groupTest{t: t, w: w, c: c}
}

// release waits until kill says (with the units released and the
// deliveries pending; killAt describes it), kills child 0, and waits until
// all total units (groups or messages) are released. It returns the time
// since the routers ran.
func (g *groupTest) release(unit string, total int, released func() int, killAt string, kill func(released, pending int) bool) time.Duration {
	g.t.Helper()
	c := g.c
	c.waitFor(killAt, 3*time.Minute, c.progress(unit, total, released, kill))
	c.kill(0)
	c.waitFor("every "+strings.TrimSuffix(unit, "s")+" released", 3*time.Minute,
		c.progress(unit, total, released, func(n, _ int) bool { return n == total }))
	return c.elapsed()
}

// finish publishes n late messages for completed groups, each with a
// random sequence number, and n redeliveries of released messages (see
// workload.late), waits until the late ones are discarded and every
// delivery acked, stops the cluster and logs the children's figures.
func (g *groupTest) finish(n int) (late []payload, msgs []*message.Message, handled, failed int64) {
	g.t.Helper()
	late, msgs = g.w.late(n, func(string) int { return 1 + g.w.rng.IntN(g.w.size) })
	g.c.publish(msgs)
	g.c.waitForLate(late)
	g.c.stop()
	handled, failed = g.c.logChildren()
	return late, msgs, handled, failed
}

// outputs checks that the children's stores are outboxes as
// transactionalOutput says, which strict reports, and returns the output
// rows in offset order, also by group.
func (g *groupTest) outputs() (strict bool, rows []row, byGroup map[string][]row) {
	g.t.Helper()
	strict = transactionalOutput
	if g.c.outbox() != strict {
		g.t.Errorf("the children report outbox stores: %t, want %t", g.c.outbox(), strict)
	}
	byGroup = map[string][]row{}
	rows = g.c.rows(g.c.output)
	for _, o := range rows {
		key := o.Metadata[correlationKey]
		byGroup[key] = append(byGroup[key], o)
	}
	return strict, rows, byGroup
}

// deliveryMode describes, for the log, what the outputs' delivery is.
func deliveryMode(strict bool) string {
	if strict {
		return "outbox: exactly once"
	}
	return "at least once: repeats of an output UUID allowed"
}

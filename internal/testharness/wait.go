package testharness

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
)

// state is what a wait sees: whether it is done, a measure of the
// cluster's work that grows while the cluster makes progress, and a
// description for the log.
type state struct {
	done     bool
	progress int
	desc     string
}

// stallTimeout is how long a wait lets the cluster make no progress at all
// before it fails the test: a slow or busy machine only makes a test
// slower, a stuck cluster fails it within a minute.
const stallTimeout = time.Minute

// waitFor polls check every 250 ms until it reports done, and fails the
// test if a child that was not killed exits, if the progress does not grow
// for stallTimeout, or if the wait lasts longer than limit.
func (c *cluster) waitFor(what string, limit time.Duration, check func() state) {
	c.t.Helper()
	start := time.Now()
	last, lastAt := -1, start
	fail := func(format string, args ...any) {
		c.t.Helper()
		var b strings.Builder
		for _, ch := range c.children {
			state := ""
			if ch.killed {
				state = " (killed)"
			}
			fmt.Fprintf(&b, "\nchild %d%s: %s", ch.index, state, ch.out.stats())
			b.WriteString(ch.tail())
		}
		c.t.Fatalf("%v: waiting until %s: "+format+"%s", append(append([]any{c.elapsed(), what}, args...), b.String())...)
	}
	for {
		s := check()
		if s.done {
			c.t.Logf("%v: %s: %s", c.elapsed(), what, s.desc)
			return
		}
		now := time.Now()
		if s.progress > last {
			last, lastAt = s.progress, now
		}
		for _, ch := range c.children {
			select {
			case <-ch.done:
				if !ch.killed {
					fail("child %d exited: %v; %s", ch.index, ch.err, s.desc)
				}
			default:
			}
		}
		switch {
		case now.Sub(lastAt) > stallTimeout:
			fail("no progress for %v: %s", stallTimeout, s.desc)
		case now.Sub(start) > limit:
			fail("not done within %v: %s", limit, s.desc)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// progress is a state check for a wait on the releases: released counts
// what the output topic shows released (by a query; distinct groups or
// messages), done says when the wait is over. Its progress measure is the
// releases plus the acked deliveries.
func (c *cluster) progress(unit string, total int, released func() int, done func(released, pending int) bool) func() state {
	return func() state {
		n, p := released(), c.pending()
		return state{
			done:     done(n, p),
			progress: n + c.published - p,
			desc:     fmt.Sprintf("%d of %d %s released, %d of %d deliveries acked", n, total, unit, c.published-p, c.published),
		}
	}
}

// waitForLate waits until the discard topic holds every message of late
// and every delivery was acked.
func (c *cluster) waitForLate(late []payload) {
	c.t.Helper()
	ids := make([]string, len(late))
	for i, p := range late {
		ids[i] = p.ID
	}
	c.waitFor("the late messages discarded and every delivery acked", 2*time.Minute, func() state {
		var d int
		err := c.db.QueryRowContext(context.Background(),
			`SELECT COUNT(DISTINCT uuid) FROM `+c.table(c.discard)+` WHERE uuid = ANY($1)`, ids).Scan(&d)
		if err != nil {
			c.t.Fatalf("counting the discarded late messages: %v", err)
		}
		p := c.pending()
		return state{
			done:     d == len(late) && p == 0,
			progress: d + c.published - p,
			desc:     fmt.Sprintf("%d of %d late messages discarded, %d deliveries pending", d, len(late), p),
		}
	})
}

// publish publishes msgs to the input topic, in order, a thousand a
// statement.
func (c *cluster) publish(msgs []*message.Message) {
	c.t.Helper()
	for len(msgs) > 0 {
		n := min(len(msgs), 1000)
		if err := c.pub.Publish(c.input, msgs[:n]...); err != nil {
			c.t.Fatalf("publishing: %v", err)
		}
		c.published += n
		msgs = msgs[n:]
	}
}

// count runs a query that returns one number.
func (c *cluster) count(query string) int {
	c.t.Helper()
	var n int
	if err := c.db.QueryRowContext(context.Background(), query).Scan(&n); err != nil {
		c.t.Fatalf("%s: %v", query, err)
	}
	return n
}

// table returns the quoted table name of topic.
func (c *cluster) table(topic string) string { return c.schema.MessagesTable(topic) }

// pending returns the number of input deliveries not acked yet.
func (c *cluster) pending() int { return c.count(`SELECT COUNT(*) FROM ` + c.table(c.input)) }

// row is a message as a topic's table holds it.
type row struct {
	Offset   int64
	UUID     string
	Payload  []byte
	Metadata map[string]string
}

// rows returns the messages of topic in offset order.
func (c *cluster) rows(topic string) []row {
	c.t.Helper()
	rs, err := c.db.QueryContext(context.Background(),
		`SELECT "offset", uuid, payload, metadata FROM `+c.table(topic)+` ORDER BY "offset"`)
	if err != nil {
		c.t.Fatal(err)
	}
	defer rs.Close()
	var out []row
	for rs.Next() {
		var (
			r        row
			metadata []byte
		)
		if err := rs.Scan(&r.Offset, &r.UUID, &r.Payload, &metadata); err != nil {
			c.t.Fatal(err)
		}
		if err := json.Unmarshal(metadata, &r.Metadata); err != nil {
			c.t.Fatalf("metadata of %s in %s: %v", r.UUID, topic, err)
		}
		out = append(out, r)
	}
	if err := rs.Err(); err != nil {
		c.t.Fatal(err)
	}
	return out
}

// logChildren logs each child's last report and returns the sums of their
// handled and failed counts. Successful handler calls beyond the deliveries
// published were deliveries handled again: those that the killed child
// handled but did not ack (its batch's transaction died with it), and
// those it handled after its last report (so the figure is a lower bound).
func (c *cluster) logChildren() (handled, failed int64) {
	c.t.Helper()
	for _, ch := range c.children {
		s := ch.out.last()
		state := "stopped"
		if ch.killed {
			state = "killed, last report"
		}
		c.t.Logf("child %d (%s): %d handled, %d failed and redelivered, %d lock errors",
			ch.index, state, s.handled, s.failed, s.lockErrors)
		handled += s.handled
		failed += s.failed
	}
	c.t.Logf("%d successful handler calls for %d deliveries: at least %d deliveries handled again after the kill",
		handled, c.published, max(handled-int64(c.published), 0))
	return handled, failed
}

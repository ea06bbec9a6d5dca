package testharness

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/lockreg/lockreg/internal/testdb"
)

// requirePostgres opens PostgreSQL through pgx with lockreg's tables (see
// testdb.Postgres) on a small pool, closed when t ends: the work runs in the
// child processes, which open the returned DSN.
func requirePostgres(t testing.TB) (db *sql.DB, dsn string) {
	t.Helper()
	pg := testdb.Postgres(t)
	pg.DB.SetMaxOpenConns(4)
	pg.DB.SetMaxIdleConns(4)
	return pg.DB, pg.DSN
}

// The metadata keys both handlers read (aggregator.CorrelationIDKey and so
// on; the resequencer's are the same).
const (
	correlationKey = "correlation_id"
	sequenceKey    = "sequence_number"
	sizeKey        = "sequence_size"
)

// payload is the payload of every input message: it names the message, so
// that an output shows which messages it carries.
type payload struct {
	Key string `json:"key"`
	Seq int    `json:"seq"`
	ID  string `json:"id"`
}

// workload is the input of a cluster test: groups of size messages each,
// delivered shuffled, some twice (the same UUID published again, as a
// producer that retries does), and optionally some with a twin: a second
// message with the same sequence number and a UUID of its own.
type workload struct {
	groups, size int
	keys         []string
	msgs         map[string][]payload       // by key, in sequence order
	twins        map[string]map[int]payload // by key and sequence number
	deliveries   []*message.Message
	duplicates   int // deliveries of a UUID published before
	twinCount    int
	rng          *rand.Rand
}

// newWorkload makes a workload. Each message gets a twin with probability
// twinRate, and each message, twin or not, is delivered twice with
// probability dupRate. The seed is logged.
func newWorkload(t testing.TB, groups, size int, dupRate, twinRate float64) *workload {
	seed := uint64(time.Now().UnixNano())
	t.Logf("workload: %d groups of %d messages, duplicates at rate %.2f, twins at rate %.2f, seed %d",
		groups, size, dupRate, twinRate, seed)
	w := &workload{groups: groups, size: size, msgs: map[string][]payload{}, twins: map[string]map[int]payload{},
		rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	deliver := func(p payload) {
		m := w.message(p)
		w.deliveries = append(w.deliveries, m)
		if w.rng.Float64() < dupRate {
			w.deliveries = append(w.deliveries, m.Copy())
			w.duplicates++
		}
	}
	for g := range groups {
		key := fmt.Sprintf("g%05d", g)
		w.keys = append(w.keys, key)
		for seq := 1; seq <= size; seq++ {
			p := payload{Key: key, Seq: seq, ID: uuid.NewString()}
			w.msgs[key] = append(w.msgs[key], p)
			deliver(p)
			if w.rng.Float64() < twinRate {
				twin := payload{Key: key, Seq: seq, ID: uuid.NewString()}
				if w.twins[key] == nil {
					w.twins[key] = map[int]payload{}
				}
				w.twins[key][seq] = twin
				w.twinCount++
				deliver(twin)
			}
		}
	}
	w.rng.Shuffle(len(w.deliveries), func(i, j int) { w.deliveries[i], w.deliveries[j] = w.deliveries[j], w.deliveries[i] })
	return w
}

// message returns the input message of p.
func (w *workload) message(p payload) *message.Message {
	b, err := json.Marshal(p)
	if err != nil {
		panic(err)
	}
	m := message.NewMessage(p.ID, b)
	m.Metadata.Set(correlationKey, p.Key)
	m.Metadata.Set(sequenceKey, strconv.Itoa(p.Seq))
	m.Metadata.Set(sizeKey, strconv.Itoa(w.size))
	return m
}

// late returns n messages for distinct completed groups: each a new
// message (a new UUID) with sequence number seq(group), and n
// redeliveries of messages those groups already released (their UUIDs
// again), all shuffled. The new messages must be discarded as late; the
// redeliveries must change nothing.
func (w *workload) late(n int, seq func(key string) int) (news []payload, all []*message.Message) {
	for _, i := range w.rng.Perm(len(w.keys))[:n] {
		key := w.keys[i]
		p := payload{Key: key, Seq: seq(key), ID: uuid.NewString()}
		news = append(news, p)
		all = append(all, w.message(p), w.message(w.msgs[key][w.rng.IntN(w.size)]))
	}
	w.rng.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	return news, all
}

// parsePayload decodes an input payload carried by an output.
func parsePayload(b []byte) (payload, error) {
	var p payload
	err := json.Unmarshal(b, &p)
	return p, err
}

// reporter reports the first few of many failures of a check, then how
// many more there were.
type reporter struct {
	t testing.TB
	n int
}

func (r *reporter) errorf(format string, args ...any) {
	r.t.Helper()
	r.n++
	if r.n <= 20 {
		r.t.Errorf(format, args...)
	}
}

func (r *reporter) done() {
	r.t.Helper()
	if r.n > 20 {
		r.t.Errorf("... and %d more failures like those", r.n-20)
	}
}

// discardWant is a message the discard topic must hold, with the reasons
// it may carry.
type discardWant struct {
	p       payload
	reasons []string
}

// checkDiscards checks that the discard topic holds every message of want,
// each with one of its reasons under reasonKey, and nothing else. A
// message discarded more than once is allowed (a delivery is handled again
// when its consumer dies before the ack) and counted.
func checkDiscards(t testing.TB, c *cluster, reasonKey string, want []discardWant) (repeated int) {
	t.Helper()
	r := &reporter{t: t}
	defer r.done()
	byID := map[string][]row{}
	for _, d := range c.rows(c.discard) {
		byID[d.UUID] = append(byID[d.UUID], d)
	}
	for _, w := range want {
		rows := byID[w.p.ID]
		delete(byID, w.p.ID)
		if len(rows) == 0 {
			r.errorf("message %s of group %s (sequence number %d) was not discarded, want it discarded as %q",
				w.p.ID, w.p.Key, w.p.Seq, w.reasons)
			continue
		}
		if len(rows) > 1 {
			repeated += len(rows) - 1
			t.Logf("message %s of group %s (sequence number %d) was discarded %d times, as %q first",
				w.p.ID, w.p.Key, w.p.Seq, len(rows), rows[0].Metadata[reasonKey])
		}
		for _, d := range rows {
			if reason := d.Metadata[reasonKey]; !slices.Contains(w.reasons, reason) {
				r.errorf("message %s of group %s (sequence number %d) was discarded with %s %q, want one of %q",
					w.p.ID, w.p.Key, w.p.Seq, reasonKey, reason, w.reasons)
			}
		}
	}
	for id, rows := range byID {
		d := rows[0]
		r.errorf("message %s of group %s (sequence number %s) was discarded %d times with %s %q; it should not be",
			id, d.Metadata[correlationKey], d.Metadata[sequenceKey], len(rows), reasonKey, d.Metadata[reasonKey])
	}
	return repeated
}

// lateDiscards returns the discards expected of late messages.
func lateDiscards(late []payload) []discardWant {
	out := make([]discardWant, len(late))
	for i, p := range late {
		out[i] = discardWant{p, []string{"late"}}
	}
	return out
}

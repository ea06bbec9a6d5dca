package testharness

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/lockreg/lockreg/registry"
)

// PerKeyTest is the cluster test of package lockmw: the test's perkey
// routers handle Messages messages of Keys keys; one is killed with
// SIGKILL at 30 %, another paused with SIGSTOP at 50 % while it runs a long
// handler, whose key the test process takes once its lease has expired. No
// two runs of a key the middleware acked may overlap (by the guard, and by
// the database's times of their steps), no run that found a newer holder in
// the guard may be acked or go unreported as a lost lease, the paused run
// must be nacked although its handler returned nil, some long handlers
// must outlive the TTL and be acked, and every message must be acked.
type PerKeyTest struct {
	Messages, Keys int
	// RenewRuns are the children (neither 0, killed, nor 1, paused) asked
	// before the publication for one long run that nobody pauses, so that
	// some long run outlives the TTL also when the random ones are few.
	RenewRuns []int
}

// Run runs the test on a cluster of cfg.
func (p PerKeyTest) Run(t *testing.T, cfg ClusterConfig) {
	cfg.kind = kindPerKey
	db, dsn := requirePostgres(t)
	messages, keys := p.Messages, p.Keys
	c := startCluster(t, db, dsn, cfg)
	pk := newPerKeyCluster(t, c, keys)
	msgs := pk.workload(messages)
	for _, i := range p.RenewRuns {
		if _, err := fmt.Fprintln(c.children[i].stdin, perKeyRenewCommand); err != nil {
			t.Fatalf("asking child %d for a long run: %v", i, err)
		}
	}
	c.publish(msgs)
	t.Logf("%v: published %d messages of %d keys", c.elapsed(), messages, keys)

	c.waitFor("30 % of the messages acked", 3*time.Minute, pk.progress(messages, 30))
	c.kill(0)
	c.waitFor("50 % of the messages acked", 3*time.Minute, pk.progress(messages, 50))
	pk.pause(1)
	c.waitFor("every message acked", 3*time.Minute, pk.progress(messages, 100))
	c.stop()
	handled, failed := c.logChildren()
	pk.check(msgs)
	t.Logf("perkey cluster: %d messages; %d handler chains acked, %d nacked; total %v", messages, handled, failed, c.elapsed())
}

// perKeyCluster is the test process's side of the perkey test.
type perKeyCluster struct {
	t           *testing.T
	c           *cluster
	keys        []string
	guard, runs string
	locks       *registry.Registry
	paused      struct { // the run paused with its child
		uuid, key string
		token     int64
	}
}

// newPerKeyCluster creates the guard and run tables of c, dropped when t
// ends, and the test process's own registry on c's region.
func newPerKeyCluster(t *testing.T, c *cluster, keys int) *perKeyCluster {
	t.Helper()
	ctx := context.Background()
	pk := &perKeyCluster{t: t, c: c}
	pk.guard, pk.runs = perKeyTables(c.input)
	t.Cleanup(func() {
		for _, table := range []string{pk.guard, pk.runs} {
			if _, err := c.db.ExecContext(ctx, `DROP TABLE IF EXISTS `+table); err != nil {
				t.Errorf("dropping %s: %v", table, err)
			}
		}
	})
	for _, q := range []string{
		`CREATE TABLE ` + pk.guard + ` (k TEXT PRIMARY KEY, fence BIGINT NOT NULL, n BIGINT NOT NULL)`,
		`CREATE TABLE ` + pk.runs + ` (id BIGSERIAL PRIMARY KEY, uuid TEXT NOT NULL, k TEXT NOT NULL, token BIGINT NOT NULL, ` +
			`child INT NOT NULL, started TIMESTAMPTZ, ended TIMESTAMPTZ, refused BOOLEAN NOT NULL, exit_ok BOOLEAN NOT NULL, ` +
			`exit_refused BOOLEAN NOT NULL, handler_ok BOOLEAN NOT NULL, acked BOOLEAN NOT NULL, lost BOOLEAN NOT NULL, long BOOLEAN NOT NULL, err TEXT NOT NULL)`,
	} {
		if _, err := c.db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	for i := range keys {
		pk.keys = append(pk.keys, fmt.Sprintf("entity-%02d", i))
		if _, err := c.db.ExecContext(ctx, `INSERT INTO `+pk.guard+` (k, fence, n) VALUES ($1, 0, 0)`, pk.keys[i]); err != nil {
			t.Fatal(err)
		}
	}
	repo, closeRepo, err := c.locks.Repository(ctx, c.db, c.lockAddrs, c.region, "clustertest-parent-"+uuid.NewString()[:8])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeRepo)
	if pk.locks, err = registry.New(repo, registry.WithIdleBetweenTries(20*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pk.locks.Close(ctx) })
	return pk
}

// workload returns n messages spread evenly over the keys, shuffled.
func (pk *perKeyCluster) workload(n int) []*message.Message {
	seed := uint64(time.Now().UnixNano())
	pk.t.Logf("workload seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	msgs := make([]*message.Message, n)
	for i := range msgs {
		key := pk.keys[i%len(pk.keys)]
		m := message.NewMessage(uuid.NewString(), []byte(`{"key":"`+key+`","n":`+strconv.Itoa(i)+`}`))
		m.Metadata.Set(entityKey, key)
		msgs[i] = m
	}
	rng.Shuffle(n, func(i, j int) { msgs[i], msgs[j] = msgs[j], msgs[i] })
	return msgs
}

// progress is the state of a wait until pct % of the n messages have an
// acked run, and at 100 % also until no delivery is pending.
func (pk *perKeyCluster) progress(n, pct int) func() state {
	return func() state {
		acked := pk.c.count(`SELECT COUNT(DISTINCT uuid) FROM ` + pk.runs + ` WHERE acked AND child <> ` + strconv.Itoa(perKeyParent))
		p := pk.c.pending()
		done := 100*acked >= pct*n
		if pct == 100 {
			done = acked == n && p == 0
		}
		return state{done: done, progress: acked + pk.c.published - p,
			desc: fmt.Sprintf("%d of %d messages acked, %d deliveries pending", acked, n, p)}
	}
}

// pause asks child i for a long handler run, stops the child with SIGSTOP
// as soon as the run reports its start, takes the run's key once its lease
// has expired, runs a guarded step under it and resumes the child.
func (pk *perKeyCluster) pause(i int) {
	t, c := pk.t, pk.c
	t.Helper()
	ch := c.children[i]
	for len(ch.out.events) > 0 {
		<-ch.out.events
	}
	if _, err := fmt.Fprintln(ch.stdin, perKeyCommand); err != nil {
		t.Fatalf("asking child %d for a long run: %v", i, err)
	}
	deadline := time.After(time.Minute)
	for pk.paused.uuid == "" {
		select {
		case ev := <-ch.out.events:
			verb, args, _ := strings.Cut(ev, " ")
			if verb != perKeyEvent {
				continue
			}
			f := map[string]string{}
			for _, kv := range strings.Fields(args) {
				k, v, _ := strings.Cut(kv, "=")
				f[k] = v
			}
			pk.paused.uuid, pk.paused.key = f["uuid"], f["key"]
			pk.paused.token, _ = strconv.ParseInt(f["token"], 10, 64)
		case <-ch.done:
			t.Fatalf("child %d exited before a long run: %v%s", i, ch.err, ch.tail())
		case <-deadline:
			t.Fatalf("child %d reported no long run within a minute%s", i, ch.tail())
		}
	}
	if err := ch.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatalf("stopping child %d: %v", i, err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			if err := ch.cmd.Process.Signal(syscall.SIGCONT); err != nil {
				t.Errorf("resuming child %d: %v", i, err)
			}
		}
	}
	defer resume()
	stopped := time.Now()
	t.Logf("%v: child %d stopped with SIGSTOP in a long run of %s (token %d)", c.elapsed(), i, pk.paused.key, pk.paused.token)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l := pk.locks.Obtain(perKeyPrefix + pk.paused.key)
	if err := l.LockContext(ctx); err != nil {
		t.Fatalf("taking %s while child %d is stopped: %v", pk.paused.key, i, err)
	}
	token := l.Token()
	var started, ended time.Time
	err := c.db.QueryRowContext(ctx, `UPDATE `+pk.guard+` SET fence = $1 WHERE k = $2 AND fence < $1 RETURNING clock_timestamp()`,
		token, pk.paused.key).Scan(&started)
	if err == nil {
		err = c.db.QueryRowContext(ctx, `UPDATE `+pk.guard+` SET n = n + 1 WHERE k = $2 AND fence = $1 RETURNING clock_timestamp()`,
			token, pk.paused.key).Scan(&ended)
	}
	if err != nil {
		t.Fatalf("the test's own guarded step on %s with token %d: %v", pk.paused.key, token, err)
	}
	if err := l.UnlockContext(ctx); err != nil {
		t.Fatalf("unlocking %s: %v", pk.paused.key, err)
	}
	if _, err := c.db.ExecContext(ctx, `INSERT INTO `+pk.runs+` (uuid, k, token, child, started, ended, refused, exit_ok, `+
		`exit_refused, handler_ok, acked, lost, long, err) VALUES ('', $1, $2, $3, $4, $5, false, true, false, true, true, false, false, '')`,
		pk.paused.key, token, perKeyParent, started, ended); err != nil {
		t.Fatal(err)
	}
	resume()
	t.Logf("%v: the test took %s with token %d %v after the stop, ran its step, and resumed child %d",
		c.elapsed(), pk.paused.key, token, time.Since(stopped).Round(time.Millisecond), i)
}

// storedRun is a run as recorded.
type storedRun struct {
	uuid, key                               string
	token                                   int64
	child                                   int
	started, ended                          sql.NullTime
	refused, exitOK, exitRefused, handlerOK bool
	acked, lost, long                       bool
	err                                     string
}

// check checks the run records against msgs.
func (pk *perKeyCluster) check(msgs []*message.Message) {
	t := pk.t
	t.Helper()
	rs, err := pk.c.db.QueryContext(context.Background(), `SELECT uuid, k, token, child, started, ended, refused, exit_ok, `+
		`exit_refused, handler_ok, acked, lost, long, err FROM `+pk.runs+` ORDER BY k, token, id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	var runs []storedRun
	for rs.Next() {
		var r storedRun
		if err := rs.Scan(&r.uuid, &r.key, &r.token, &r.child, &r.started, &r.ended, &r.refused, &r.exitOK,
			&r.exitRefused, &r.handlerOK, &r.acked, &r.lost, &r.long, &r.err); err != nil {
			t.Fatal(err)
		}
		runs = append(runs, r)
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}

	r := &reporter{t: t}
	acked := map[string]bool{}
	var prev *storedRun
	var stale, lost, long, longAcked, nacked int
	var paused *storedRun
	for i := range runs {
		run := &runs[i]
		what := fmt.Sprintf("run of %s with token %d (message %s, child %d)", run.key, run.token, run.uuid, run.child)
		if run.refused || run.exitRefused {
			stale++
			if run.acked {
				r.errorf("%s found a newer holder in the guard, and was acked: %s", what, run.err)
			}
			if !run.lost {
				r.errorf("%s found a newer holder in the guard, but the middleware did not report the lease lost: %q", what, run.err)
			}
		}
		if run.lost {
			lost++
		}
		if !run.acked {
			nacked++
		}
		if run.long {
			long++
			if run.acked && run.ended.Time.Sub(run.started.Time) > perKeyTTL {
				longAcked++
			}
		}
		if run.uuid == pk.paused.uuid && run.token == pk.paused.token {
			paused = run
		}
		if !run.acked {
			continue
		}
		if run.child != perKeyParent {
			acked[run.uuid] = true
		}
		// Acked runs of a key, in token order, follow each other.
		if prev != nil && prev.key == run.key && run.started.Time.Before(prev.ended.Time) {
			r.errorf("%s started at %v, before the acked run with token %d (message %s, child %d) ended at %v",
				what, run.started.Time, prev.token, prev.uuid, prev.child, prev.ended.Time)
		}
		prev = run
	}
	for _, m := range msgs {
		if !acked[m.UUID] {
			r.errorf("message %s of %s has no acked run", m.UUID, m.Metadata.Get(entityKey))
		}
	}
	r.done()
	switch {
	case paused == nil:
		t.Errorf("no record of the paused run of %s with token %d", pk.paused.key, pk.paused.token)
	case paused.acked || !paused.lost || !paused.handlerOK || !paused.exitRefused:
		t.Errorf("the paused run: acked %t, lease lost %t, its handler returned nil %t, its guarded exit refused %t (%q); "+
			"want nacked for a lost lease although the handler returned nil, its exit refused",
			paused.acked, paused.lost, paused.handlerOK, paused.exitRefused, paused.err)
	}
	if longAcked == 0 {
		t.Errorf("none of the %d long runs outlived the TTL and was acked: renewal unproven", long)
	}
	t.Logf("%d runs recorded: %d nacked, %d with the lease lost, %d that found a newer holder in the guard, "+
		"%d long, %d of them acked after outliving the TTL %v", len(runs), nacked, lost, stale, long, longAcked, perKeyTTL)
}

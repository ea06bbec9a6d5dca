package chaos

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockreg/lockreg/etcdlock"
)

// The fault tests. Each runs a cluster of three member processes and
// holder processes on one key, and checks the ledger: no two holders at
// once, tokens strictly increasing. Nothing is asserted of durations, only
// of the order of events.

const key = "k"

// dir is the etcd directory of key's lock in region (see etcdlock's
// keys.go), and entry the key of holder proc's entry in it.
func dir(region string) string {
	return etcdlock.DefaultPrefix + region + "\x00" + strconv.Itoa(len(key)) + ":" + key + "\x00"
}

func entry(region string, proc int) string { return dir(region) + fmt.Sprintf("holder-%d", proc) }

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// waitFor polls cond every 20 ms until it holds, failing t after within,
// or at once when one of procs has exited.
func waitFor(t *testing.T, what string, within time.Duration, procs []*proc, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		for _, p := range procs {
			if err := p.running(); err != nil {
				t.Fatalf("waiting for %s: %v", what, err)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// lookup reads key k: its create revision and lease, or found false.
func lookup(t *testing.T, cli *clientv3.Client, k string) (kv *mvccpb.KeyValue, found bool) {
	t.Helper()
	for attempt := 0; ; attempt++ {
		resp, err := cli.Get(ctxT(t, 10*time.Second), k)
		if err == nil {
			if len(resp.Kvs) == 0 {
				return nil, false
			}
			return resp.Kvs[0], true
		}
		if attempt == 20 {
			t.Fatalf("reading %q: %v", k, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// queued waits until the lock's directory has n entries: the holder and
// n-1 waiters.
func queued(t *testing.T, cli *clientv3.Client, region string, n int64, procs []*proc) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%d entries in the lock's directory", n), time.Minute, procs, func() bool {
		resp, err := cli.Get(ctxT(t, 10*time.Second), dir(region), clientv3.WithPrefix(), clientv3.WithCountOnly())
		return err == nil && resp.Count == n
	})
}

// cyclers starts n cycle holders on key, until told STOP.
func cyclers(t *testing.T, n int, endpoints []string, region string, l *ledger) []*proc {
	var procs []*proc
	for i := range n {
		procs = append(procs, holder{mode: "cycle", endpoints: endpoints, region: region, key: key, proc: i,
			ttl: 2 * time.Second, holdFor: 10 * time.Millisecond, ledger: l}.start(t))
	}
	return procs
}

// stop tells cycle holders to stop and waits until each has exited by
// itself, with status 0.
func stop(t *testing.T, procs []*proc) {
	t.Helper()
	for _, p := range procs {
		p.send(t, "STOP")
	}
	for _, p := range procs {
		p.wait(t, time.Minute)
	}
}

// 1. The leader is killed with SIGKILL while three holder processes cycle
// the same key: another member becomes the leader, the holders go on, no
// two hold the key at once and tokens keep increasing.
func TestLeaderKilledWhileHoldersCycle(t *testing.T) {
	c := startCluster(t)
	cli := c.client()
	l := newLedger(t)
	procs := cyclers(t, 3, c.endpoints(), uuid.NewString(), l)
	waitFor(t, "6 holds", time.Minute, procs, func() bool { n, _ := enters(l.read(t), ""); return n >= 6 })
	old := c.leader(cli)
	l.mark(t, "leader killed")
	c.kill(old)
	now := c.leader(cli)
	l.mark(t, "new leader")
	waitFor(t, "6 holds under the new leader", time.Minute, procs, func() bool {
		_, n := enters(l.read(t), "new leader")
		return n >= 6
	})
	stop(t, procs)
	recs := l.read(t)
	holds := check(t, recs)
	_, during := enters(recs, "leader killed")
	t.Logf("leader %s killed, %s elected; %d holds, %d after the kill", c.members[old].name, c.members[now].name, holds, during)
}

// 2. A follower is killed with SIGKILL and restarted from its data
// directory while three holder processes cycle the same key: holds go on
// throughout, and the follower serves again.
func TestFollowerKilledAndRestartedWhileHoldersCycle(t *testing.T) {
	c := startCluster(t)
	cli := c.client()
	l := newLedger(t)
	procs := cyclers(t, 3, c.endpoints(), uuid.NewString(), l)
	waitFor(t, "6 holds", time.Minute, procs, func() bool { n, _ := enters(l.read(t), ""); return n >= 6 })
	follower := (c.leader(cli) + 1) % len(c.members)
	l.mark(t, "follower killed")
	c.kill(follower)
	waitFor(t, "6 holds without the follower", time.Minute, procs, func() bool {
		_, n := enters(l.read(t), "follower killed")
		return n >= 6
	})
	c.restart(follower)
	l.mark(t, "follower restarted")
	only := newClient(t, []string{c.members[follower].client.String()})
	if _, err := only.Get(ctxT(t, 30*time.Second), "any"); err != nil { // linearizable: it reached the leader
		t.Fatalf("the restarted follower does not serve: %v", err)
	}
	waitFor(t, "6 holds after the restart", time.Minute, procs, func() bool {
		_, n := enters(l.read(t), "follower restarted")
		return n >= 6
	})
	stop(t, procs)
	recs := l.read(t)
	holds := check(t, recs)
	t.Logf("follower %s killed and restarted; %d holds", c.members[follower].name, holds)
}

// 3. A holder process killed with SIGKILL while it holds the key: its
// lease outlives it and is expired by the cluster, and only then does the
// waiting process get the key, with a greater token.
func TestHolderKilledLosesTheKeyWhenTheClusterExpiresItsLease(t *testing.T) {
	c := startCluster(t)
	cli := c.client()
	l := newLedger(t)
	region := uuid.NewString()
	// 3 s, renewed every second: the lease has 2 s left at least when the
	// holder is killed, for the test's first look at it.
	const ttl = 3 * time.Second
	a := holder{mode: "hold", endpoints: c.endpoints(), region: region, key: key, proc: 0, ttl: ttl, ledger: l}.start(t)
	a.expect(t, "HELD", time.Minute)
	b := holder{mode: "cycle", endpoints: c.endpoints(), region: region, key: key, proc: 1, ttl: ttl,
		holdFor: 10 * time.Millisecond, iterations: 1, ledger: l}.start(t)
	queued(t, cli, region, 2, []*proc{a, b})
	a.kill()
	if !isKilled(a.err) {
		t.Fatalf("the holder was not killed by SIGKILL: %v", a.err)
	}
	if err := l.append("KILLED 0"); err != nil {
		t.Fatal(err)
	}
	kv, ok := lookup(t, cli, entry(region, 0))
	if !ok {
		t.Fatal("the killed holder's entry was gone at once")
	}
	lease := clientv3.LeaseID(kv.Lease)
	// Until the cluster expires the lease, the waiter must not have the
	// key: each ledger read that comes before a look that finds the lease
	// alive must show no hold of the waiter.
	alive := 0
	for {
		recs := l.read(t)
		ttl, err := cli.TimeToLive(ctxT(t, 10*time.Second), lease)
		if err != nil {
			t.Fatal(err)
		}
		if ttl.TTL <= 0 {
			break
		}
		alive++
		if _, in := entered(recs, 1); in {
			t.Fatalf("the waiter entered while the killed holder's lease was alive (%d s left)\n%s", ttl.TTL, dump(recs))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if alive == 0 {
		t.Fatal("the killed holder's lease was never seen alive after the kill")
	}
	b.wait(t, time.Minute)
	recs := l.read(t)
	check(t, recs)
	first, _ := entered(recs, 0)
	next, ok := entered(recs, 1)
	if !ok {
		t.Fatalf("the waiter never held the key\n%s", dump(recs))
	}
	t.Logf("holder (token %d) killed; its lease was alive at %d looks after the kill, then expired by the cluster; the waiter got token %d",
		first.token, alive, next.token)
}

// 4. A holder process cut off from every member by TCP proxies: its Done
// closes while its entry (and so its lease) still exists in the cluster,
// and the waiter, connected directly, gets the key only after that.
func TestPartitionedHolderSeesDoneBeforeItsLeaseExpires(t *testing.T) {
	c := startCluster(t)
	cli := c.client()
	l := newLedger(t)
	region := uuid.NewString()
	var proxies []*proxy
	var via []string
	for _, m := range c.members {
		p := startProxy(t, m.client.Host)
		proxies = append(proxies, p)
		via = append(via, "http://"+p.Addr())
	}
	// 1.5 s: the cluster grants 2 s, its shortest lease, so that the
	// parent sees the entry alive after Done closed by a margin that a
	// busy machine keeps.
	const ttl = 1500 * time.Millisecond
	a := holder{mode: "hold", endpoints: via, region: region, key: key, proc: 0, ttl: ttl, ledger: l}.start(t)
	a.expect(t, "HELD", time.Minute)
	b := holder{mode: "cycle", endpoints: c.endpoints(), region: region, key: key, proc: 1, ttl: ttl,
		holdFor: 10 * time.Millisecond, iterations: 1, ledger: l}.start(t)
	queued(t, cli, region, 2, []*proc{a, b})
	kv, _ := lookup(t, cli, entry(region, 0))
	waitFor(t, "a renewal through the proxies", time.Minute, []*proc{a, b}, func() bool {
		now, ok := lookup(t, cli, entry(region, 0))
		return ok && now.Lease != kv.Lease
	})
	for _, p := range proxies {
		p.Cut()
	}
	l.mark(t, "partitioned")
	tokenA := kv.CreateRevision
	when := "while its lease was alive"
	waitFor(t, "the partitioned holder's Done", time.Minute, []*proc{a}, func() bool {
		recs := l.read(t)
		if !has(recs, "LOST", 0) {
			return false
		}
		if !lostAfter(recs, 0, "partitioned") {
			// Renewals failed before the cut (a loaded machine): the
			// holder's repository could still reach the cluster and revoke
			// the lease at its deadline. The order is checked below.
			when = "before the partition (a loaded machine)"
			return true
		}
		// Done closed before this look: the entry must still be there.
		if now, ok := lookup(t, cli, entry(region, 0)); !ok || now.CreateRevision != tokenA {
			t.Fatalf("the partitioned holder's entry was gone when its Done had closed\n%s", dump(recs))
		}
		return true
	})
	a.expect(t, "LOST", 10*time.Second)
	b.wait(t, time.Minute)
	if _, ok := lookup(t, cli, entry(region, 0)); ok {
		t.Fatal("the partitioned holder's entry is still there after the waiter held the key")
	}
	for _, p := range proxies {
		p.Heal()
	}
	recs := l.read(t)
	check(t, recs)
	next, _ := entered(recs, 1)
	t.Logf("holder (token %d) partitioned: Done closed %s; the waiter got token %d after", tokenA, when, next.token)
}

// 5a. The whole cluster killed with SIGKILL under a holder and restarted
// from its data directories, after an outage longer than the holder's
// TTL. etcd keeps leases across a restart and counts their TTL anew from
// the election of the new leader (a lease does not expire while no leader
// runs): a lease granted before the outage is still there after it, and
// expires a TTL later. The holder cannot renew during the outage, so its
// Done closes (at its own deadline, before the cluster is back); its
// entry either expires a TTL after the restart or is revoked by its
// repository once the cluster answers again; the waiter gets the key only
// then, after the holder's Done, with a greater token: the lock is lost
// safely.
func TestClusterRestartedFromItsData(t *testing.T) {
	c := startCluster(t)
	cli := c.client()
	l := newLedger(t)
	region := uuid.NewString()
	const ttl = 1500 * time.Millisecond
	a := holder{mode: "hold", endpoints: c.endpoints(), region: region, key: key, proc: 0, ttl: ttl, ledger: l}.start(t)
	a.expect(t, "HELD", time.Minute)
	b := holder{mode: "cycle", endpoints: c.endpoints(), region: region, key: key, proc: 1, ttl: ttl,
		holdFor: 10 * time.Millisecond, iterations: 1, ledger: l}.start(t)
	queued(t, cli, region, 2, []*proc{a, b})
	// A lease of the parent's own, never renewed: etcd's behaviour, apart
	// from lockreg's.
	// 4 s: after the restart, the test reads it well within its TTL even
	// on a loaded machine.
	canary, err := cli.Grant(ctxT(t, 10*time.Second), 4)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctxT(t, 10*time.Second), "canary-"+region, "x", clientv3.WithLease(canary.ID)); err != nil {
		t.Fatal(err)
	}
	granted := time.Now()
	tokenA, _ := lookup(t, cli, entry(region, 0))
	c.killAll()
	l.mark(t, "cluster killed")
	a.expect(t, "LOST", time.Minute)
	// The outage outlasts the canary's TTL by the wall clock.
	time.Sleep(time.Until(granted.Add(5 * time.Second)))
	c.startAll("existing")
	l.mark(t, "cluster restarted")
	c.leader(cli)
	if kv, ok := lookup(t, cli, "canary-"+region); !ok || clientv3.LeaseID(kv.Lease) != canary.ID {
		t.Fatal("a lease granted before the outage, longer than its TTL, did not survive the restart")
	}
	left, err := cli.TimeToLive(ctxT(t, 10*time.Second), canary.ID)
	if err != nil {
		t.Fatal(err)
	}
	if left.TTL <= 0 {
		t.Fatalf("the canary lease after the restart: TTL %d s of %d", left.TTL, left.GrantedTTL)
	}
	_, held := lookup(t, cli, entry(region, 0))
	waitFor(t, "the canary lease's expiry after the restart", time.Minute, nil, func() bool {
		_, ok := lookup(t, cli, "canary-"+region)
		return !ok
	})
	b.wait(t, time.Minute)
	recs := l.read(t)
	check(t, recs)
	if has(recs, "EXIT", 0) || countEnters(recs, 0) != 1 {
		t.Fatalf("the holder held the key again\n%s", dump(recs))
	}
	// The waiter's hold came after the holder's LOST (check), so after the
	// restart unless the holder lost the key before the cluster was killed.
	next, ok := entered(recs, 1)
	if !ok || next.token <= tokenA.CreateRevision {
		t.Fatalf("the waiter's hold: token %d, the holder's %d\n%s", next.token, tokenA.CreateRevision, dump(recs))
	}
	fate := "revoked by its repository when the cluster answered again"
	if held {
		fate = "still there after the restart, expired by the cluster a TTL later"
	}
	t.Logf("cluster killed under the holder (token %d), restarted after its Done closed: the canary lease survived with %d s left of %d; "+
		"the holder's entry was %s; the waiter got token %d", tokenA.CreateRevision, left.TTL, left.GrantedTTL, fate, next.token)
}

// lostAfter reports whether proc's LOST record follows the MARK text.
func lostAfter(recs []record, proc int, text string) bool {
	seen := false
	for _, r := range recs {
		switch {
		case r.kind == "MARK" && r.text == text:
			seen = true
		case r.kind == "LOST" && r.proc == proc:
			return seen
		}
	}
	return false
}

func countEnters(recs []record, proc int) int {
	n := 0
	for _, r := range recs {
		if r.kind == "ENTER" && r.proc == proc {
			n++
		}
	}
	return n
}

// 5b. The whole cluster killed with SIGKILL under a holder whose TTL is
// far longer than the outage, and restarted at once from its data
// directories: the holder's lease survives the restart, so the holder
// keeps the key (its Done stays open, a renewal after the restart keeps
// its token, its release succeeds), and the waiter gets the key only
// after that release, with a greater token: the lock is kept safely.
func TestClusterRestartedQuicklyUnderAHolderThatKeepsTheKey(t *testing.T) {
	c := startCluster(t)
	cli := c.client()
	l := newLedger(t)
	region := uuid.NewString()
	// Done closes 24 s after the last renewal: the restart of three member
	// processes takes a few seconds, even under load.
	const ttl = 30 * time.Second
	a := holder{mode: "hold", endpoints: c.endpoints(), region: region, key: key, proc: 0, ttl: ttl, ledger: l}.start(t)
	a.expect(t, "HELD", time.Minute)
	b := holder{mode: "cycle", endpoints: c.endpoints(), region: region, key: key, proc: 1, ttl: 2 * time.Second,
		holdFor: 10 * time.Millisecond, iterations: 1, ledger: l}.start(t)
	queued(t, cli, region, 2, []*proc{a, b})
	before, _ := lookup(t, cli, entry(region, 0))
	c.killAll()
	l.mark(t, "cluster killed")
	c.startAll("existing")
	l.mark(t, "cluster restarted")
	c.leader(cli)
	after, ok := lookup(t, cli, entry(region, 0))
	if !ok || after.CreateRevision != before.CreateRevision {
		t.Fatalf("the holder's entry did not survive the restart: %v", after)
	}
	left, err := cli.TimeToLive(ctxT(t, 10*time.Second), clientv3.LeaseID(after.Lease))
	if err != nil {
		t.Fatal(err)
	}
	if left.TTL <= 0 {
		t.Fatalf("the holder's lease after the restart: TTL %d s of %d", left.TTL, left.GrantedTTL)
	}
	a.send(t, "RENEW")
	a.expect(t, "RENEWED", time.Minute)
	renewed, ok := lookup(t, cli, entry(region, 0))
	if !ok || renewed.CreateRevision != before.CreateRevision || renewed.Lease == after.Lease {
		t.Fatalf("the renewal after the restart did not move the entry to a new lease with the same token: %v", renewed)
	}
	if recs := l.read(t); has(recs, "LOST", 0) || has(recs, "ENTER", 1) {
		t.Fatalf("the holder lost the key across the restart\n%s", dump(recs))
	}
	a.send(t, "RELEASE")
	a.expect(t, "RELEASED", time.Minute)
	b.wait(t, time.Minute)
	recs := l.read(t)
	check(t, recs)
	next, ok := entered(recs, 1)
	if !ok || has(recs, "LOST", 0) {
		t.Fatalf("after the holder's release\n%s", dump(recs))
	}
	t.Logf("cluster killed and restarted under the holder (token %d): its lease survived with %d s left of %d, a renewal kept the token, "+
		"the release handed the key to the waiter (token %d)", before.CreateRevision, left.TTL, left.GrantedTTL, next.token)
}

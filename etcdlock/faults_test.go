package etcdlock_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/lockreg/lockreg/etcdlock"
	"github.com/lockreg/lockreg/registry"
)

// When the whole cluster stops answering, a holder's renewals fail and
// its Done closes before its TTL, counted from the last renewal, is over:
// before its lease could have expired by the cluster's clock.
func TestDoneClosesWhenTheClusterIsGone(t *testing.T) {
	cl := startCluster(t, 3)
	c := cl.newClient(t)
	const ttl = 3 * time.Second
	repo, err := etcdlock.New(c, etcdlock.WithErrorHandler(func(error) {}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // the cluster is gone: the lock's entry cannot be revoked, and expires with it
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		repo.Close(ctx)
	})
	var mu sync.Mutex
	var lastRenewal time.Time
	locks, err := registry.New(renewals{repo, &mu, &lastRenewal}, registry.WithTTL(ttl), registry.WithKeepAlive(),
		registry.WithErrorHandler(func(string, error) {}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		locks.Close(ctx)
	})
	l := locks.Obtain("partitioned")
	if err := l.LockContext(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	lastRenewal = time.Now()
	mu.Unlock()
	time.Sleep(ttl / 2) // a renewal or so succeeds
	stopped := time.Now()
	gone := make(chan struct{})
	go func() { defer close(gone); cl.stopAll() }() // takes seconds: members close their connections
	defer func() { <-gone }()
	select {
	case <-l.Done():
	case <-time.After(2 * ttl):
		t.Fatal("Done did not close although the cluster was gone")
	}
	closed := time.Now()
	mu.Lock()
	last := lastRenewal
	mu.Unlock()
	if closed.Sub(last) >= ttl {
		t.Fatalf("Done closed %v after the last successful renewal was sent, not within the TTL %v", closed.Sub(last), ttl)
	}
	t.Logf("Done closed %v after the cluster stopped, %v after the last renewal", closed.Sub(stopped), closed.Sub(last))
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = l.UnlockContext(ctx) // the cluster is gone: it fails, by its deadline
}

// renewals records when the last successful renewal was sent.
type renewals struct {
	*etcdlock.Repository
	mu   *sync.Mutex
	last *time.Time
}

func (r renewals) Renew(ctx context.Context, key string, ttl time.Duration) error {
	sent := time.Now()
	err := r.Repository.Renew(ctx, key, ttl)
	if err == nil {
		r.mu.Lock()
		*r.last = sent
		r.mu.Unlock()
	}
	return err
}

// closedPort returns a loopback address that nothing listens on.
func closedPort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr
}

// Endpoints that do not answer: the repository's calls fail by their
// context's deadline, naming the endpoints, and never hang; its Check
// fails the same way.
func TestUnreachableEndpointsFailWithinTheDeadline(t *testing.T) {
	ep := closedPort(t)
	// clientv3.New connects in the background (etcd 3.7), DialTimeout or
	// not: it returns a client at once.
	cfg := clientv3.Config{Endpoints: []string{ep}, DialTimeout: time.Second, Logger: zap.NewNop()}
	cli, err := clientv3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	var mu sync.Mutex
	var handled []error
	repo, err := etcdlock.New(cli)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		repo.Close(ctx)
	})
	locks, err := registry.New(repo, registry.WithTTL(time.Second), registry.WithErrorHandler(func(_ string, err error) {
		mu.Lock()
		handled = append(handled, err)
		mu.Unlock()
	}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		locks.Close(ctx)
	})
	const wait = 2 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	start := time.Now()
	err = locks.Obtain("k").LockContext(ctx)
	if took := time.Since(start); took > wait+time.Second {
		t.Fatalf("LockContext took %v with a %v deadline", took, wait)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("LockContext on unreachable endpoints: %v, want the deadline's error", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(handled) == 0 || !errors.Is(handled[0], registry.ErrTransient) || !strings.Contains(handled[0].Error(), ep) {
		t.Fatalf("the error handler got %v, want transient errors naming %s", handled, ep)
	}
	cctx, ccancel := context.WithTimeout(context.Background(), time.Second)
	defer ccancel()
	if err := repo.Check(cctx); err == nil || !strings.Contains(err.Error(), "no etcd endpoint") {
		t.Fatalf("Check on unreachable endpoints: %v", err)
	}
}

// Credentials the cluster refuses fail clientv3.New at once; a user
// without a role gets a repository whose Acquire is refused at its first
// call, not retried.
func TestAuthenticationFailuresAreClearErrors(t *testing.T) {
	cl := sharedCluster(t)
	start := time.Now()
	cli, err := clientv3.New(clientConfig(cl.endpoints(), "root", "wrong"))
	if err == nil {
		cli.Close()
		t.Fatal("a wrong password was accepted")
	}
	if !strings.Contains(err.Error(), "authentication failed") {
		t.Fatalf("clientv3.New with a wrong password: %v after %v, want an authentication failure", err, time.Since(start))
	}
	nobody := newClientAs(t, cl.endpoints(), "nobody", nobodyPassword)
	repo := newRepo(t, nobody)
	_, _, err = repo.Acquire(ctxT(t), "k", time.Second)
	if err == nil || errors.Is(err, registry.ErrTransient) || !strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("Acquire as a user without a role: %v, want a permission error that is not transient", err)
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://127.0.0.1:1"}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if _, err := etcdlock.New(nil); !errors.Is(err, etcdlock.ErrInvalidOption) {
		t.Fatalf("New(nil): %v", err)
	}
	for name, opt := range map[string]etcdlock.Option{
		"prefix without a trailing slash": etcdlock.WithPrefix("locks"),
		"empty prefix":                    etcdlock.WithPrefix(""),
		"prefix with a space":             etcdlock.WithPrefix("my locks/"),
		"region with a slash":             etcdlock.WithRegion("a/b"),
		"region with NUL":                 etcdlock.WithRegion("a\x00"),
		"empty client id":                 etcdlock.WithClientID(""),
		"client id with a space":          etcdlock.WithClientID("a b"),
		"nil error handler":               etcdlock.WithErrorHandler(nil),
	} {
		if _, err := etcdlock.New(cli, opt); !errors.Is(err, etcdlock.ErrInvalidOption) {
			t.Errorf("%s: New = %v, want ErrInvalidOption", name, err)
		}
	}
	r, err := etcdlock.New(cli, etcdlock.WithPrefix("app/locks/"), etcdlock.WithRegion("billing"), etcdlock.WithClientID("node-1"))
	if err != nil {
		t.Fatal(err)
	}
	if d := r.Describe(); d != (registry.Description{Backend: "etcd", Region: "billing", Client: "node-1"}) {
		t.Fatalf("Describe = %+v", d)
	}
}

// A holder that dies (here: its client closed, so that its repository can
// revoke nothing) keeps the lock until the cluster expires its lease, by
// the leader's clock, and not much longer.
func TestADeadHoldersLeaseIsExpiredByTheCluster(t *testing.T) {
	cl := sharedCluster(t)
	c := sharedClient(t)
	region := randomRegion()
	dying, err := clientv3.New(clientConfig(cl.endpoints(), "root", rootPassword))
	if err != nil {
		t.Fatal(err)
	}
	a, err := etcdlock.New(dying, etcdlock.WithRegion(region), etcdlock.WithErrorHandler(func(error) {}))
	if err != nil {
		t.Fatal(err)
	}
	b := newRepo(t, c, etcdlock.WithRegion(region))
	const ttl = 2 * time.Second
	mustAcquire(t, a, "k", ttl)
	taken := time.Now()
	dying.Close()
	for {
		_, ok, err := b.Acquire(ctxT(t), "k", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		held := time.Since(taken)
		if ok {
			if held < ttl-200*time.Millisecond {
				t.Fatalf("the lock was free %v after a %v lease was taken", held, ttl)
			}
			t.Logf("free %v after the dead holder took it", held)
			break
		}
		if held > ttl+3*time.Second {
			t.Fatalf("the dead holder's %v lease still held the lock after %v", ttl, held)
		}
		time.Sleep(50 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	a.Close(ctx) // its client is closed: nothing to revoke it with
}

// The cluster helper's stop and restart, as the fault tests to come will
// use them: with one of three members stopped, locks still work on the
// other two; the member restarts from its data directory and serves again.
func TestLocksWorkWithOneMemberStoppedAndItRejoins(t *testing.T) {
	cl := startCluster(t, 3)
	c := cl.newClient(t)
	a, b := newRepo(t, c), newRepo(t, c)
	lock := func(r *etcdlock.Repository) {
		t.Helper()
		locks, err := registry.New(r, registry.WithTTL(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer locks.Close(ctxT(t))
		l := locks.Obtain("k")
		if err := l.LockContext(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		if err := l.UnlockContext(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	}
	cl.stop(0)
	lock(a)
	cl.restart(t, 0)
	only := newClientAs(t, []string{cl.members[0].client.String()}, "root", rootPassword)
	if _, err := only.Get(ctxT(t), "any"); err != nil {
		t.Fatalf("the restarted member does not serve: %v", err)
	}
	lock(b)
}

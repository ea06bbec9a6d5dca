package chaos

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// The cluster of a test: three etcd members, each a child process (the
// test binary re-executed, running go.etcd.io/etcd/server/v3/embed), so
// that a member killed with SIGKILL dies as a real server does, mid-write,
// with no chance to step down or close its connections. A member restarts
// from its data directory on the same ports.

// The environment of a member child.
const (
	memberNameEnv    = "LOCKREG_ETCD_CHAOS_NAME"
	memberDirEnv     = "LOCKREG_ETCD_CHAOS_DIR"
	memberPeerEnv    = "LOCKREG_ETCD_CHAOS_PEER"
	memberClientEnv  = "LOCKREG_ETCD_CHAOS_CLIENT"
	memberInitialEnv = "LOCKREG_ETCD_CHAOS_INITIAL"
	memberStateEnv   = "LOCKREG_ETCD_CHAOS_STATE"
)

// member is one etcd server of a test cluster.
type member struct {
	name, dir    string
	peer, client url.URL
	id           uint64 // as the member reported it
	p            *proc  // nil while stopped
}

type cluster struct {
	t       *testing.T
	members []*member
	initial string
}

// freeURL returns an http URL on a loopback port that was free a moment ago.
func freeURL(t *testing.T) url.URL {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return url.URL{Scheme: "http", Host: l.Addr().String()}
}

// startCluster starts three member processes, each with a data directory
// of its own, and waits until each serves; they are killed when t ends.
func startCluster(t *testing.T) *cluster {
	t.Helper()
	c := &cluster{t: t}
	var initial []string
	for i := range 3 {
		m := &member{name: fmt.Sprintf("m%d", i), dir: t.TempDir(), peer: freeURL(t), client: freeURL(t)}
		c.members = append(c.members, m)
		initial = append(initial, m.name+"="+m.peer.String())
	}
	c.initial = strings.Join(initial, ",")
	c.startAll(embed.ClusterStateFlagNew)
	return c
}

// startAll starts every stopped member at once (a first start needs a
// majority up to elect a leader) and waits until each serves.
func (c *cluster) startAll(state string) {
	c.t.Helper()
	var wg sync.WaitGroup
	for i, m := range c.members {
		if m.p == nil {
			m.p = c.spawn(i, state)
		}
	}
	errs := make([]string, len(c.members))
	for i, m := range c.members {
		wg.Go(func() { errs[i] = c.ready(m) })
	}
	wg.Wait()
	for _, e := range errs {
		if e != "" {
			c.t.Fatal(e)
		}
	}
}

func (c *cluster) spawn(i int, state string) *proc {
	m := c.members[i]
	return startProc(c.t, "etcd "+m.name, "member",
		memberNameEnv+"="+m.name, memberDirEnv+"="+m.dir, memberPeerEnv+"="+m.peer.String(),
		memberClientEnv+"="+m.client.String(), memberInitialEnv+"="+c.initial, memberStateEnv+"="+state)
}

// ready waits for m's "READY id" line; it returns why not, for any
// goroutine.
func (c *cluster) ready(m *member) string {
	timeout := time.After(90 * time.Second)
	for {
		select {
		case line := <-m.p.lines:
			if _, err := fmt.Sscanf(line, "READY %x", &m.id); err == nil {
				return ""
			}
		case <-m.p.exited:
			return fmt.Sprintf("etcd member %s exited before serving: %v\n%s", m.name, m.p.err, m.p.stderr.String())
		case <-timeout:
			return fmt.Sprintf("etcd member %s did not serve within 90 s\n%s", m.name, m.p.stderr.String())
		}
	}
}

// kill kills member i with SIGKILL and waits until it has exited.
func (c *cluster) kill(i int) {
	c.t.Helper()
	m := c.members[i]
	if m.p == nil {
		return
	}
	m.p.kill()
	if !isKilled(m.p.err) {
		c.t.Fatalf("etcd member %s was not killed by SIGKILL: %v", m.name, m.p.err)
	}
	m.p = nil
}

// killAll kills every member at once.
func (c *cluster) killAll() {
	c.t.Helper()
	var wg sync.WaitGroup
	for _, m := range c.members {
		if p := m.p; p != nil {
			wg.Go(p.kill)
		}
	}
	wg.Wait()
	for _, m := range c.members {
		if m.p != nil && !isKilled(m.p.err) {
			c.t.Fatalf("etcd member %s was not killed by SIGKILL: %v", m.name, m.p.err)
		}
		m.p = nil
	}
}

// restart starts stopped member i again from its data directory and
// waits until it serves.
func (c *cluster) restart(i int) {
	c.t.Helper()
	m := c.members[i]
	m.p = c.spawn(i, embed.ClusterStateFlagExisting)
	if e := c.ready(m); e != "" {
		c.t.Fatal(e)
	}
}

// endpoints returns the client URLs of every member.
func (c *cluster) endpoints() []string {
	var eps []string
	for _, m := range c.members {
		eps = append(eps, m.client.String())
	}
	return eps
}

// leader waits until a running member says that it is the leader, and
// returns its index.
func (c *cluster) leader(cli *clientv3.Client) int {
	c.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		for i, m := range c.members {
			if m.p == nil {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			st, err := cli.Status(ctx, m.client.String())
			cancel()
			if err == nil && st.Leader != 0 && st.Leader == st.Header.MemberId {
				return i
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.t.Fatal("no running member became the leader within 60 s")
	return -1
}

// clientConfig is the configuration of the tests' clients, parent's and
// children's: a dead member is noticed within seconds.
func clientConfig(endpoints []string) clientv3.Config {
	return clientv3.Config{
		Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialKeepAliveTime: time.Second, DialKeepAliveTimeout: time.Second,
	}
}

// client returns a client of every member, closed when the test ends.
func (c *cluster) client() *clientv3.Client {
	c.t.Helper()
	return newClient(c.t, c.endpoints())
}

func newClient(t *testing.T, endpoints []string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientConfig(endpoints))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// runMember is the body of a member child: it starts the member, prints
// "READY id" once it serves, and runs until killed or until its standard
// input closes.
func runMember() error {
	parse := func(env string) (url.URL, error) {
		u, err := url.Parse(os.Getenv(env))
		if err != nil {
			return url.URL{}, err
		}
		return *u, nil
	}
	peer, err := parse(memberPeerEnv)
	if err != nil {
		return err
	}
	client, err := parse(memberClientEnv)
	if err != nil {
		return err
	}
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir = os.Getenv(memberNameEnv), os.Getenv(memberDirEnv)
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.InitialCluster, cfg.ClusterState, cfg.InitialClusterToken = os.Getenv(memberInitialEnv), os.Getenv(memberStateEnv), "lockreg-chaos"
	// 100 ms heartbeats and a 1 s election timeout, etcd's defaults: the
	// members are processes of their own on 2 loaded cores, where shorter
	// timeouts would elect leaders for nothing. The shortest lease the
	// cluster grants is then 2 s (1.5 election timeouts, rounded up).
	cfg.TickMs, cfg.ElectionMs = 100, 1000
	cfg.LogLevel, cfg.LogOutputs = "error", []string{"/dev/null"}
	if os.Getenv("LOCKREG_ETCD_LOG") != "" {
		cfg.LogLevel, cfg.LogOutputs = "info", []string{"stderr"}
	}
	cfg.EnableGRPCGateway = false
	// A SIGKILL loses nothing written without fsync: the kernel keeps it;
	// only the machine's crash would.
	cfg.UnsafeNoFsync = true
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("starting etcd member %s: %w", cfg.Name, err)
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		return err
	case <-time.After(90 * time.Second):
		return fmt.Errorf("etcd member %s did not become ready within 90 s", cfg.Name)
	}
	fmt.Printf("READY %x\n", uint64(e.Server.MemberID()))
	cmds := stdinCommands() // exits when the input closes
	for {
		select {
		case <-cmds:
		case err := <-e.Err():
			return err
		}
	}
}

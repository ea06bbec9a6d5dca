package etcdlock_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// The tests run etcd in-process: a cluster of three members started with
// go.etcd.io/etcd/server/v3/embed on loopback ports chosen free, each with
// a data directory of its own, with authentication on (user root; user
// nobody, with no role, stands for a client the cluster refuses). The
// helpers below start, stop and restart members so that fault tests can
// kill one.

const (
	rootPassword   = "lockreg-root"
	nobodyPassword = "lockreg-nobody"
)

// member is one etcd server of a test cluster.
type member struct {
	name, dir       string
	peerURL, client url.URL
	mu              sync.Mutex
	etcd            *embed.Etcd // nil while stopped
}

// cluster is a test cluster: its members and the string of its initial
// cluster.
type cluster struct {
	members []*member
	initial string
	// authToken configures signed (JWT) tokens, which every member
	// accepts; etcd's simple tokens are known only to the member that
	// issued them.
	authToken string
}

// freeURL returns an http URL on a loopback port that was free a moment ago.
func freeURL() (url.URL, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return url.URL{}, err
	}
	defer l.Close()
	return url.URL{Scheme: "http", Host: l.Addr().String()}, nil
}

// stopper collects what a cluster started outside a test needs undone,
// and the first error of its start.
type stopper struct {
	err  error
	undo []func()
}

func (s *stopper) run() {
	for i := len(s.undo) - 1; i >= 0; i-- {
		s.undo[i]()
	}
	s.undo = nil
}

// startCluster starts n members for tb, stopped and removed when tb ends.
func startCluster(tb testing.TB, n int) *cluster {
	tb.Helper()
	var st stopper
	c := startClusterOn(&st, n)
	tb.Cleanup(st.run)
	if st.err != nil {
		tb.Fatal(st.err)
	}
	return c
}

// startClusterOn starts n members, each in a data directory of its own,
// waits until they serve and enables authentication. st.run stops them
// and removes the directories; st.err says why the start failed.
func startClusterOn(st *stopper, n int) *cluster {
	c := &cluster{}
	var initial []string
	for i := range n {
		dir, err := os.MkdirTemp("", "etcdlock-test-")
		if err != nil {
			st.err = err
			return c
		}
		st.undo = append(st.undo, func() { os.RemoveAll(dir) })
		peer, err := freeURL()
		if err != nil {
			st.err = err
			return c
		}
		client, err := freeURL()
		if err != nil {
			st.err = err
			return c
		}
		m := &member{name: fmt.Sprintf("m%d", i), dir: dir, peerURL: peer, client: client}
		c.members = append(c.members, m)
		initial = append(initial, m.name+"="+m.peerURL.String())
	}
	c.initial = strings.Join(initial, ",")
	keys, err := os.MkdirTemp("", "etcdlock-test-keys-")
	if err != nil {
		st.err = err
		return c
	}
	st.undo = append(st.undo, func() { os.RemoveAll(keys) })
	if c.authToken, err = jwtConfig(keys); err != nil {
		st.err = err
		return c
	}
	st.undo = append(st.undo, c.stopAll)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i, m := range c.members {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = c.start(m, embed.ClusterStateFlagNew) }()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		st.err = err
		return c
	}
	if err := enableAuth(c.endpoints()); err != nil {
		st.err = fmt.Errorf("enabling authentication: %w", err)
	}
	return c
}

// start starts m with state "new" (first start) or "existing" (restart
// from its data directory) and waits until it serves.
func (c *cluster) start(m *member, state string) error {
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir = m.name, m.dir
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{m.peerURL}, []url.URL{m.peerURL}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{m.client}, []url.URL{m.client}
	cfg.InitialCluster, cfg.ClusterState, cfg.InitialClusterToken = c.initial, state, "lockreg-test"
	// 50 ms ticks and a 500 ms election timeout: leader changes in a
	// second, and the shortest lease the cluster grants is 1 s (etcd's
	// minimum is 1.5 election timeouts, rounded up to a second).
	cfg.TickMs, cfg.ElectionMs = 50, 500
	// Members log errors when stopped; LOCKREG_ETCD_LOG=1 shows their log.
	cfg.LogLevel, cfg.LogOutputs = "error", []string{"/dev/null"}
	if os.Getenv("LOCKREG_ETCD_LOG") != "" {
		cfg.LogLevel, cfg.LogOutputs = "info", []string{"stderr"}
	}
	cfg.EnableGRPCGateway = false
	cfg.AuthToken = c.authToken
	cfg.UnsafeNoFsync = true // test data: a crash of the test loses nothing that matters
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("starting etcd member %s: %w", m.name, err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return fmt.Errorf("etcd member %s: %w", m.name, err)
	case <-time.After(60 * time.Second):
		e.Close()
		return fmt.Errorf("etcd member %s did not become ready within 60 s", m.name)
	}
	m.mu.Lock()
	m.etcd = e
	m.mu.Unlock()
	return nil
}

// stop stops member i, if it runs.
func (c *cluster) stop(i int) {
	m := c.members[i]
	m.mu.Lock()
	e := m.etcd
	m.etcd = nil
	m.mu.Unlock()
	if e != nil {
		e.Close()
	}
}

// restart starts stopped member i again from its data directory.
func (c *cluster) restart(t testing.TB, i int) {
	t.Helper()
	if err := c.start(c.members[i], embed.ClusterStateFlagExisting); err != nil {
		t.Fatal(err)
	}
}

func (c *cluster) stopAll() {
	var wg sync.WaitGroup
	for i := range c.members {
		wg.Add(1)
		go func() { defer wg.Done(); c.stop(i) }()
	}
	wg.Wait()
}

// endpoints returns the client URLs of every member.
func (c *cluster) endpoints() []string {
	var eps []string
	for _, m := range c.members {
		eps = append(eps, m.client.String())
	}
	return eps
}

// clientConfig is the configuration of a client of the cluster as user
// with password.
func clientConfig(endpoints []string, user, password string) clientv3.Config {
	return clientv3.Config{
		Endpoints: endpoints, Username: user, Password: password,
		DialTimeout: 15 * time.Second, Logger: zap.NewNop(), // authentication, on 2 loaded cores
		// Notice a dead member within seconds, not after gRPC's defaults.
		DialKeepAliveTime: 2 * time.Second, DialKeepAliveTimeout: 2 * time.Second,
	}
}

// newClient returns a client of c as root, closed when t ends.
func (c *cluster) newClient(t testing.TB) *clientv3.Client {
	t.Helper()
	return newClientAs(t, c.endpoints(), "root", rootPassword)
}

func newClientAs(t testing.TB, endpoints []string, user, password string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientConfig(endpoints, user, password))
	if err != nil {
		t.Fatalf("etcd client of %v as %s: %v", endpoints, user, err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// enableAuth adds the users root and nobody (no role) and turns
// authentication on.
func enableAuth(endpoints []string) error {
	cfg := clientConfig(endpoints, "", "")
	cli, err := clientv3.New(cfg)
	if err != nil {
		return err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := cli.UserAdd(ctx, "root", rootPassword); err != nil {
		return err
	}
	if _, err := cli.UserGrantRole(ctx, "root", "root"); err != nil {
		return err
	}
	if _, err := cli.UserAdd(ctx, "nobody", nobodyPassword); err != nil {
		return err
	}
	_, err = cli.AuthEnable(ctx)
	return err
}

// jwtConfig writes an RSA key pair to dir and returns the auth-token
// setting of members that sign tokens with it.
func jwtConfig(dir string) (string, error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return "", err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return "", err
	}
	priv := filepath.Join(dir, "jwt.key")
	pubf := filepath.Join(dir, "jwt.pub")
	if err := os.WriteFile(priv, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		return "", err
	}
	if err := os.WriteFile(pubf, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o600); err != nil {
		return "", err
	}
	return "jwt,pub-key=" + pubf + ",priv-key=" + priv + ",sign-method=RS256,ttl=1h", nil
}

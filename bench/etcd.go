package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	etcdversion "go.etcd.io/etcd/api/v3/version"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/lockreg/lockreg/etcdlock"
	"github.com/lockreg/lockreg/registry"
)

// The etcd contestants: lockreg's registry over package etcdlock, and
// etcd's own client/v3/concurrency Mutex on a Session, each on a cluster
// of three members (server "etcd-3") and of one ("etcd-1"). The benchmark
// starts the clusters itself, in-process with go.etcd.io/etcd/server/v3/embed
// (the version of etcdlock's tests), on loopback ports chosen free and in
// temporary data directories, with etcd's defaults (100 ms heartbeat,
// 1 s election timeout, fsync on), the first time a contestant of theirs
// opens; run stops them and removes the directories at its end
// (closeEtcd). Debian's etcd-server is 3.4, older than the 3.7 client.
//
// Every instance has its own client (one gRPC connection to each member,
// as a separate process would), so the contended scenario's instances
// have their own sessions. The statement count of these contestants is
// the gRPC requests the client sent (Range, Txn, DeleteRange, LeaseGrant,
// LeaseRevoke) and the streams it opened (LeaseKeepAlive: a KeepAliveOnce
// is a stream of one request; Watch): the messages on a lasting stream,
// a watch's, the session's periodic keep-alives or etcdlock's keep-alives
// (one stream per client since issue 30), are not counted. With
// -v each instance prints its counts by method when it closes.
const (
	etcdLockregPrefix = "bench/lockreg/"
	etcdMutexPrefix   = "bench/mutex/"
)

func init() { contestants = append(contestants, etcdContestants...) }

var etcdContestants = []contestant{
	// registry.New(etcdlock.New(client)): a lease per entry, waiters
	// watching their predecessor.
	{name: "lockreg-etcd", server: "etcd-3", isLock: true, counted: true, open: openEtcdLockreg(3)},
	// concurrency.NewMutex(session, key): Lock, Unlock; one session lease
	// per instance (TTL 10 s, the registry's default TTL).
	{name: "etcd-mutex", server: "etcd-3", isLock: true, counted: true, open: openEtcdMutex(3)},
	{name: "lockreg-etcd-1", server: "etcd-1", isLock: true, counted: true, open: openEtcdLockreg(1)},
	{name: "etcd-mutex-1", server: "etcd-1", isLock: true, counted: true, open: openEtcdMutex(1)},
}

// etcdEnv holds the clusters of one run, started on first use.
type etcdEnv struct {
	mu       sync.Mutex
	clusters map[int]*etcdCluster // by members
	errs     map[int]error        // why a cluster could not start
}

var (
	etcdEnvsMu sync.Mutex
	etcdEnvs   = map[*env]*etcdEnv{}
)

func etcdFor(e *env) *etcdEnv {
	etcdEnvsMu.Lock()
	defer etcdEnvsMu.Unlock()
	x := etcdEnvs[e]
	if x == nil {
		x = &etcdEnv{clusters: map[int]*etcdCluster{}, errs: map[int]error{}}
		etcdEnvs[e] = x
	}
	return x
}

// closeEtcd stops the clusters of e's run and removes their data.
func closeEtcd(e *env) {
	etcdEnvsMu.Lock()
	x := etcdEnvs[e]
	delete(etcdEnvs, e)
	etcdEnvsMu.Unlock()
	if x == nil {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, c := range x.clusters {
		c.stop()
	}
	x.clusters = map[int]*etcdCluster{}
}

// etcdFacts describes the clusters that ran.
func etcdFacts(e *env) [][2]string {
	etcdEnvsMu.Lock()
	x := etcdEnvs[e]
	etcdEnvsMu.Unlock()
	if x == nil {
		return nil
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	var f [][2]string
	for _, n := range []int{3, 1} {
		if c := x.clusters[n]; c != nil {
			f = append(f, [2]string{fmt.Sprintf("etcd-%d", n), c.fact()})
		} else if err := x.errs[n]; err != nil {
			f = append(f, [2]string{fmt.Sprintf("etcd-%d", n), "skipped: " + err.Error()})
		}
	}
	return f
}

// cluster returns the running cluster of n members, starting it the first
// time.
func (x *etcdEnv) cluster(n int) (*etcdCluster, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if c := x.clusters[n]; c != nil {
		return c, nil
	}
	if err := x.errs[n]; err != nil {
		return nil, err
	}
	c, err := startEtcdCluster(n)
	if err != nil {
		x.errs[n] = err
		return nil, err
	}
	x.clusters[n] = c
	return c, nil
}

// etcdCluster is an in-process etcd cluster of the benchmark.
type etcdCluster struct {
	members []*embed.Etcd
	dirs    []string
	eps     []string
	version string
}

// etcdFreeURL returns an http URL on a loopback port that was free a
// moment ago.
func etcdFreeURL() (url.URL, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return url.URL{}, err
	}
	defer l.Close()
	return url.URL{Scheme: "http", Host: l.Addr().String()}, nil
}

// startEtcdCluster starts n members and waits until each serves.
func startEtcdCluster(n int) (c *etcdCluster, err error) {
	c = &etcdCluster{}
	defer func() {
		if err != nil {
			c.stop()
		}
	}()
	type urls struct{ peer, client url.URL }
	var (
		us      []urls
		initial []string
	)
	for i := range n {
		dir, err := os.MkdirTemp("", "lockreg-bench-etcd-")
		if err != nil {
			return c, err
		}
		c.dirs = append(c.dirs, dir)
		peer, err := etcdFreeURL()
		if err != nil {
			return c, err
		}
		client, err := etcdFreeURL()
		if err != nil {
			return c, err
		}
		us = append(us, urls{peer, client})
		initial = append(initial, fmt.Sprintf("b%d=%s", i, peer.String()))
		c.eps = append(c.eps, client.Host)
	}
	members := make([]*embed.Etcd, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			cfg := embed.NewConfig()
			cfg.Name, cfg.Dir = fmt.Sprintf("b%d", i), c.dirs[i]
			cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{us[i].peer}, []url.URL{us[i].peer}
			cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{us[i].client}, []url.URL{us[i].client}
			cfg.InitialCluster, cfg.ClusterState = strings.Join(initial, ","), embed.ClusterStateFlagNew
			cfg.InitialClusterToken = fmt.Sprintf("lockreg-bench-%d", n)
			cfg.LogLevel, cfg.LogOutputs = "error", []string{"/dev/null"}
			if os.Getenv("LOCKREG_ETCD_LOG") != "" {
				cfg.LogLevel, cfg.LogOutputs = "info", []string{"stderr"}
			}
			cfg.EnableGRPCGateway = false
			m, err := embed.StartEtcd(cfg)
			if err != nil {
				errs[i] = fmt.Errorf("starting etcd member %d of %d: %w", i, n, err)
				return
			}
			members[i] = m
			select {
			case <-m.Server.ReadyNotify():
			case err := <-m.Err():
				errs[i] = fmt.Errorf("etcd member %d of %d: %w", i, n, err)
			case <-time.After(60 * time.Second):
				errs[i] = fmt.Errorf("etcd member %d of %d did not become ready within 60 s", i, n)
			}
		})
	}
	wg.Wait()
	for _, m := range members {
		if m != nil {
			c.members = append(c.members, m)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return c, err
	}
	c.version = etcdversion.Version
	return c, nil
}

func (c *etcdCluster) stop() {
	for _, m := range c.members {
		m.Close()
	}
	c.members = nil
	for _, d := range c.dirs {
		os.RemoveAll(d)
	}
	c.dirs = nil
}

func (c *etcdCluster) fact() string {
	s := "members"
	if len(c.eps) == 1 {
		s = "member"
	}
	return fmt.Sprintf("etcd %s, %d %s in-process (go.etcd.io/etcd/server/v3/embed) on %s, data in %s, "+
		"heartbeat 100 ms, election timeout 1 s, fsync on; a client per instance with every endpoint",
		c.version, len(c.eps), s, strings.Join(c.eps, ","), os.TempDir())
}

// etcdCounter counts the unary requests a client sends, by method.
type etcdCounter struct {
	n        atomic.Int64
	mu       sync.Mutex
	byMethod map[string]int64
}

func (c *etcdCounter) count(method string) {
	c.n.Add(1)
	c.mu.Lock()
	c.byMethod[method[strings.LastIndexByte(method, '/')+1:]]++
	c.mu.Unlock()
}

func (c *etcdCounter) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	c.count(method)
	return invoker(ctx, method, req, reply, cc, opts...)
}

// interceptStream counts a stream opened: a KeepAliveOnce opens one per
// call (one request), a watcher's stream lasts.
func (c *etcdCounter) interceptStream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	c.count(method)
	return streamer(ctx, desc, cc, method, opts...)
}

// String lists the requests by method, most first.
func (c *etcdCounter) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ms []string
	for m := range c.byMethod {
		ms = append(ms, m)
	}
	sort.Slice(ms, func(i, j int) bool { return c.byMethod[ms[i]] > c.byMethod[ms[j]] })
	var s []string
	for _, m := range ms {
		s = append(s, fmt.Sprintf("%s %d", m, c.byMethod[m]))
	}
	return strings.Join(s, ", ")
}

// openEtcdClient starts the cluster of n members if needed and opens a
// client on all of its endpoints, its requests counted.
func openEtcdClient(e *env, n int) (*clientv3.Client, *etcdCounter, error) {
	c, err := etcdFor(e).cluster(n)
	if err != nil {
		return nil, nil, fmt.Errorf("etcd-%d unavailable: %w", n, err)
	}
	cnt := &etcdCounter{byMethod: map[string]int64{}}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   slices.Clone(c.eps),
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(cnt.intercept), grpc.WithChainStreamInterceptor(cnt.interceptStream)},
	})
	if err != nil {
		return nil, nil, err
	}
	return cli, cnt, nil
}

// ---- lockreg over etcdlock ----

type etcdLockregInst struct {
	name string
	e    *env
	cli  *clientv3.Client
	n    *etcdCounter
	reg  *registry.Registry
}

func openEtcdLockreg(members int) func(context.Context, *env, int) (instance, error) {
	name := "lockreg-etcd"
	if members == 1 {
		name += "-1"
	}
	return func(ctx context.Context, e *env, pool int) (instance, error) {
		cli, n, err := openEtcdClient(e, members)
		if err != nil {
			return nil, err
		}
		repo, err := etcdlock.New(cli, etcdlock.WithPrefix(etcdLockregPrefix), etcdlock.WithRegion("bench"),
			etcdlock.WithErrorHandler(func(err error) { e.logf("%s: %v", name, err) }))
		if err != nil {
			cli.Close()
			return nil, err
		}
		reg, err := registry.New(repo, registry.WithErrorHandler(func(key string, err error) {
			e.logf("%s: %s: %v", name, key, err)
		}))
		if err != nil {
			cli.Close()
			return nil, err
		}
		return &etcdLockregInst{name: name, e: e, cli: cli, n: n, reg: reg}, nil
	}
}

func (i *etcdLockregInst) locker(_ context.Context, key string) (locker, error) {
	return lockregLocker{i.reg.Obtain(key)}, nil
}
func (i *etcdLockregInst) stmts() int64 { return i.n.n.Load() }
func (i *etcdLockregInst) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := i.reg.Close(ctx)
	if i.e.verbose {
		fmt.Fprintf(os.Stderr, "bench: %s: etcd requests of an instance: %s\n", i.name, i.n)
	}
	return errors.Join(err, i.cli.Close())
}

// ---- etcd's concurrency.Mutex ----

type etcdMutexInst struct {
	name string
	e    *env
	cli  *clientv3.Client
	n    *etcdCounter
	s    *concurrency.Session
}

func openEtcdMutex(members int) func(context.Context, *env, int) (instance, error) {
	name := "etcd-mutex"
	if members == 1 {
		name += "-1"
	}
	return func(ctx context.Context, e *env, pool int) (instance, error) {
		cli, n, err := openEtcdClient(e, members)
		if err != nil {
			return nil, err
		}
		s, err := concurrency.NewSession(cli, concurrency.WithTTL(int(peerTTL/time.Second)), concurrency.WithContext(context.Background()))
		if err != nil {
			cli.Close()
			return nil, err
		}
		return &etcdMutexInst{name: name, e: e, cli: cli, n: n, s: s}, nil
	}
}

func (i *etcdMutexInst) locker(_ context.Context, key string) (locker, error) {
	return etcdMutexLocker{concurrency.NewMutex(i.s, etcdMutexPrefix+key)}, nil
}
func (i *etcdMutexInst) stmts() int64 { return i.n.n.Load() }
func (i *etcdMutexInst) close() error {
	err := i.s.Close() // revokes the session's lease, and so its keys
	if i.e.verbose {
		fmt.Fprintf(os.Stderr, "bench: %s: etcd requests of an instance: %s\n", i.name, i.n)
	}
	return errors.Join(err, i.cli.Close())
}

type etcdMutexLocker struct{ m *concurrency.Mutex }

func (l etcdMutexLocker) lock(ctx context.Context) error   { return l.m.Lock(ctx) }
func (l etcdMutexLocker) unlock(ctx context.Context) error { return l.m.Unlock(ctx) }

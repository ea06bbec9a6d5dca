package clustertest

import (
	"context"
	"database/sql"
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

	"github.com/lockreg/lockreg/etcdlock"
	"github.com/lockreg/lockreg/internal/testharness"
	"github.com/lockreg/lockreg/registry"
)

// The locks of these tests are in a three-member etcd cluster that the
// test process runs in-process (go.etcd.io/etcd/server/v3/embed, loopback
// ports, temporary directories), started by the first test that needs it
// and stopped by TestMain; the children connect to it as clients.

var (
	etcdOnce sync.Once
	etcdEps  []string
	etcdErr  error
	etcdStop = func() {}
)

// etcdEndpoints returns the client URLs of the tests' etcd cluster,
// starting it first.
func etcdEndpoints(t testing.TB) []string {
	t.Helper()
	etcdOnce.Do(func() { etcdEps, etcdStop, etcdErr = startEtcd(3) })
	if etcdErr != nil {
		t.Fatalf("starting the etcd cluster: %v", etcdErr)
	}
	return etcdEps
}

func stopEtcd() { etcdStop() }

func freeURL() (url.URL, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return url.URL{}, err
	}
	defer l.Close()
	return url.URL{Scheme: "http", Host: l.Addr().String()}, nil
}

// startEtcd starts n members at once and waits until each serves; stop
// closes them and removes their directories.
func startEtcd(n int) (endpoints []string, stop func(), err error) {
	var undo []func()
	var members []*embed.Etcd
	stop = func() {
		// All members at once, as etcdlock's tests stop theirs: members
		// closed one by one leave peer connections behind.
		var wg sync.WaitGroup
		for _, e := range members {
			wg.Go(e.Close)
		}
		wg.Wait()
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}
	var cfgs []*embed.Config
	var initial []string
	for i := range n {
		dir, err := os.MkdirTemp("", "clustertest-etcd-")
		if err != nil {
			return nil, stop, err
		}
		undo = append(undo, func() { os.RemoveAll(dir) })
		peer, err := freeURL()
		if err != nil {
			return nil, stop, err
		}
		client, err := freeURL()
		if err != nil {
			return nil, stop, err
		}
		cfg := embed.NewConfig()
		cfg.Name, cfg.Dir = fmt.Sprintf("m%d", i), dir
		cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
		cfg.InitialClusterToken = "lockreg-clustertest"
		cfg.TickMs, cfg.ElectionMs = 100, 1000
		cfg.LogLevel, cfg.LogOutputs = "error", []string{"/dev/null"}
		cfg.EnableGRPCGateway = false
		cfg.UnsafeNoFsync = true
		cfgs = append(cfgs, cfg)
		initial = append(initial, cfg.Name+"="+peer.String())
		endpoints = append(endpoints, client.String())
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i, cfg := range cfgs {
		cfg.InitialCluster = strings.Join(initial, ",")
		wg.Go(func() {
			e, err := embed.StartEtcd(cfg)
			if err != nil {
				errs[i] = err
				return
			}
			mu.Lock()
			members = append(members, e)
			mu.Unlock()
			select {
			case <-e.Server.ReadyNotify():
			case err := <-e.Err():
				errs[i] = err
			case <-time.After(90 * time.Second):
				errs[i] = fmt.Errorf("etcd member %s did not become ready within 90 s", cfg.Name)
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, stop, err
		}
	}
	return endpoints, stop, nil
}

// locks are in the tests' etcd cluster, started by the first cluster that
// needs it; every process's repository is a client of its own.
var locks = testharness.Locks{
	Addrs: etcdEndpoints,
	Repository: func(_ context.Context, _ *sql.DB, endpoints []string, region, clientID string) (registry.Repository, func(), error) {
		return newEtcdRepository(endpoints, region, clientID)
	},
}

// newEtcdRepository returns an etcdlock repository of a client of its own
// on endpoints, and a function that closes both.
func newEtcdRepository(endpoints []string, region, clientID string) (registry.Repository, func(), error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialKeepAliveTime: 2 * time.Second, DialKeepAliveTimeout: 2 * time.Second})
	if err != nil {
		return nil, nil, err
	}
	repo, err := etcdlock.New(cli, etcdlock.WithRegion(region), etcdlock.WithClientID(clientID))
	if err != nil {
		cli.Close()
		return nil, nil, err
	}
	return repo, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		repo.Close(ctx)
		cli.Close()
	}, nil
}

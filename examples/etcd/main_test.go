package main

import (
	"context"
	"errors"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// startMember starts one etcd member in-process on loopback ports that
// were free a moment ago, with its data in a temporary directory; it is
// closed when t ends. It returns its client endpoint.
func startMember(t *testing.T) string {
	t.Helper()
	free := func() url.URL {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return url.URL{Scheme: "http", Host: l.Addr().String()}
	}
	peer, client := free(), free()
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir = "example", t.TempDir()
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.LogLevel, cfg.LogOutputs = "error", []string{"/dev/null"}
	cfg.UnsafeNoFsync = true // test data
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		t.Fatal(err)
	case <-time.After(60 * time.Second):
		t.Fatal("the etcd member did not become ready within 60 s")
	}
	return client.Host
}

// Two runs of the Quick start at once on one member: one waits for the
// other, each writes all its lines under one token, and the second
// holder's token is greater.
func TestTheQuickStartRunsOnEtcd(t *testing.T) {
	endpoints, err := parseArgs([]string{"-etcd", startMember(t)}, &strings.Builder{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	lines := []string{"2 h consulting", "1 licence", "travel"}
	type saved struct {
		run   int
		token int64
	}
	var (
		mu  sync.Mutex
		log []saved
		wg  sync.WaitGroup
	)
	errs := make([]error, 2)
	for i := range 2 {
		wg.Go(func() {
			errs[i] = run(ctx, endpoints, lines, func(ctx context.Context, line string, token int64) error {
				mu.Lock()
				log = append(log, saved{i, token})
				mu.Unlock()
				time.Sleep(10 * time.Millisecond) // give the other run a chance to interleave, which it must not
				return nil
			})
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if len(log) != 2*len(lines) {
		t.Fatalf("saved %d lines, want %d: %v", len(log), 2*len(lines), log)
	}
	first, second := log[0], log[len(lines)]
	for k, s := range log {
		want := first
		if k >= len(lines) {
			want = second
		}
		if s != want {
			t.Fatalf("line %d saved as %+v, want %+v: the runs interleaved or the token changed: %v", k, s, want, log)
		}
	}
	if first.run == second.run || first.token <= 0 || second.token <= first.token {
		t.Errorf("runs and tokens %+v then %+v: want two runs, the second with a greater token", first, second)
	}
}

func TestWithoutEndpointsItSaysSoAndStartsNothing(t *testing.T) {
	for _, args := range [][]string{nil, {"-etcd", ""}, {"-etcd", " , "}} {
		var out strings.Builder
		_, err := parseArgs(args, &out)
		if !errors.Is(err, errNoEndpoints) {
			t.Errorf("parseArgs(%q) = %v, want errNoEndpoints", args, err)
		}
		if !strings.Contains(out.String(), "-etcd host:port") {
			t.Errorf("parseArgs(%q) printed %q: it does not say how to pass the endpoints", args, out.String())
		}
	}
	eps, err := parseArgs([]string{"-etcd", "a:1, b:2"}, &strings.Builder{})
	if err != nil || strings.Join(eps, "|") != "a:1|b:2" {
		t.Errorf("parseArgs(-etcd 'a:1, b:2') = %q, %v", eps, err)
	}
}

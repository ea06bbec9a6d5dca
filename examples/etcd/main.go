// Command etcd is the README's Quick start on etcd: the same lock, lease
// kept alive in the background, invoice lines written under it with the
// fencing token and a stop when the lease can no longer be renewed, with
// the locks kept by package etcdlock on the etcd v3 cluster whose client
// endpoints -etcd names.
//
//	cd examples/etcd && go run . -etcd 127.0.0.1:2379,127.0.0.1:22379,127.0.0.1:32379
//
// It is a module of its own, like etcdlock, so that lockreg's own module
// does not depend on etcd's client. Without -etcd it starts no server: it
// says that it needs the endpoints and exits with status 2. Its test runs
// it against a member started in-process.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/lockreg/lockreg/etcdlock"
	"github.com/lockreg/lockreg/registry"
)

func main() {
	endpoints, err := parseArgs(os.Args[1:], os.Stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lines := []string{"2 h consulting", "1 licence", "travel"}
	save := func(ctx context.Context, line string, token int64) error {
		fmt.Printf("saved %q with token %d\n", line, token)
		return nil
	}
	if err := run(ctx, endpoints, lines, save); err != nil {
		log.Fatal(err)
	}
}

// errNoEndpoints is what parseArgs returns without -etcd.
var errNoEndpoints = errors.New("no etcd endpoints: pass -etcd host:port[,host:port...], the client URLs of an etcd v3 cluster " +
	"(etcd's own default is 127.0.0.1:2379); this example starts no etcd server")

// parseArgs returns the endpoints of -etcd, or explains on errOut why
// there are none.
func parseArgs(args []string, errOut io.Writer) ([]string, error) {
	fs := flag.NewFlagSet("etcd", flag.ContinueOnError)
	fs.SetOutput(errOut)
	list := fs.String("etcd", "", "comma-separated client endpoints of the etcd cluster (host:port or URL)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	var endpoints []string
	for _, ep := range strings.Split(*list, ",") {
		if ep = strings.TrimSpace(ep); ep != "" {
			endpoints = append(endpoints, ep)
		}
	}
	if len(endpoints) == 0 {
		fmt.Fprintln(errOut, "examples/etcd:", errNoEndpoints)
		return nil, errNoEndpoints
	}
	return endpoints, nil
}

// run writes lines with save while it holds the lock on invoice-42 in
// etcd; save stands for storage that refuses writes carrying an older
// token. Past the client, it is the Quick start with the repository on
// etcd.
func run(ctx context.Context, endpoints []string, lines []string, save func(ctx context.Context, line string, token int64) error) error {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	// Waiters queue by create revision; a release wakes the next one only.
	repo, err := etcdlock.New(cli)
	if err != nil {
		return err
	}
	locks, err := registry.New(repo, registry.WithTTL(30*time.Second), registry.WithKeepAlive())
	if err != nil {
		return err
	}
	defer locks.Close(ctx)

	l := locks.Obtain("invoice-42")
	if err := l.LockContext(ctx); err != nil { // waits; other instances queue behind us
		return err
	}
	defer l.Unlock() // a lease found lost goes to the registry's error handler
	for _, line := range lines {
		select {
		case <-l.Done(): // renewals failed: stop before the lease can expire
			return errors.New("invoice-42: lease not renewed, work stopped")
		default:
		}
		if err := save(ctx, line, l.Token()); err != nil { // storage refuses older tokens
			return err
		}
	}
	return nil
}

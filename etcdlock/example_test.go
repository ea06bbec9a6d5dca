package etcdlock_test

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockreg/lockreg/etcdlock"
	"github.com/lockreg/lockreg/registry"
)

// A registry whose locks hold leases in etcd, as in the README.
func ExampleNew() {
	ctx := context.Background()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{"127.0.0.1:2379", "127.0.0.1:22379", "127.0.0.1:32379"},
		DialTimeout: 5 * time.Second,
	})
	if err != nil {
		panic(err)
	}
	defer cli.Close() // the repository never closes it
	repo, err := etcdlock.New(cli, etcdlock.WithRegion("billing"))
	if err != nil {
		panic(err)
	}
	locks, err := registry.New(repo, registry.WithTTL(30*time.Second), registry.WithKeepAlive())
	if err != nil {
		panic(err)
	}
	defer locks.Close(ctx)

	l := locks.Obtain("invoice-42")
	if err := l.LockContext(ctx); err != nil {
		panic(err)
	}
	defer l.Unlock()
	_ = l.Token() // pass it to storage that refuses older tokens
	select {
	case <-l.Done(): // closes before the lease can expire, if renewals fail
	default:
	}
}

// Two registries, as two processes would be, on the test cluster: the
// second gets the lock only once the first unlocks it, with a greater
// fencing token.
func ExampleRepository_fencing() {
	ctx := context.Background()
	cli := exampleClient()
	defer cli.Close()
	newLocks := func() *registry.Registry {
		repo, err := etcdlock.New(cli, etcdlock.WithRegion("example-fencing"))
		if err != nil {
			panic(err)
		}
		locks, err := registry.New(repo)
		if err != nil {
			panic(err)
		}
		return locks
	}
	a, b := newLocks(), newLocks()
	defer a.Close(ctx)
	defer b.Close(ctx)

	la, lb := a.Obtain("report"), b.Obtain("report")
	if err := la.LockContext(ctx); err != nil {
		panic(err)
	}
	fmt.Println("b while a holds it:", lb.TryLock())
	first := la.Token()
	la.Unlock()
	if err := lb.LockContext(ctx); err != nil {
		panic(err)
	}
	fmt.Println("b after a unlocked:", lb.Token() > first)
	lb.Unlock()
	// Output:
	// b while a holds it: false
	// b after a unlocked: true
}

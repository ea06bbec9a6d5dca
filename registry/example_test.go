package registry_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lockreg/lockreg/registry"
	"github.com/lockreg/lockreg/registry/registrytest"
)

func Example() {
	reg, err := registry.NewLocal()
	if err != nil {
		panic(err)
	}
	defer reg.Close(context.Background())

	l := reg.Obtain("order-42")
	l.Lock()
	fmt.Println("holding", l.Key())
	l.Unlock()
	// Output: holding order-42
}

// Two registries over one storage stand for two service instances: while
// one holds a key, the other's TryLockContext gives up at its deadline.
func ExampleLock_TryLockContext() {
	storage := registrytest.NewMemory() // jdbc.NewLockRepository in production
	a, err := registry.New(storage.NewClient())
	if err != nil {
		panic(err)
	}
	b, err := registry.New(storage.NewClient())
	if err != nil {
		panic(err)
	}
	defer a.Close(context.Background())
	defer b.Close(context.Background())

	ctx := context.Background()
	if err := a.Obtain("report").LockContext(ctx); err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	ok, err := b.Obtain("report").TryLockContext(ctx)
	fmt.Println("b got the lock:", ok, err)
	// Output: b got the lock: false <nil>
}

// A holder that stalls past its TTL loses the lease; UnlockContext tells it,
// so it can treat the work it did as suspect.
func ExampleLock_UnlockContext() {
	storage := registrytest.NewMemory()
	slow, err := registry.New(storage.NewClient(), registry.WithTTL(50*time.Millisecond))
	if err != nil {
		panic(err)
	}
	other, err := registry.New(storage.NewClient(), registry.WithIdleBetweenTries(10*time.Millisecond))
	if err != nil {
		panic(err)
	}
	defer slow.Close(context.Background())
	defer other.Close(context.Background())

	ctx := context.Background()
	l := slow.Obtain("invoice-7")
	if err := l.LockContext(ctx); err != nil {
		panic(err)
	}
	// The holder stalls; the other instance takes the key once the lease expires.
	if err := other.Obtain("invoice-7").LockContext(ctx); err != nil {
		panic(err)
	}
	err = l.UnlockContext(ctx)
	fmt.Println("lease lost:", errors.Is(err, registry.ErrLockLost))
	// Output: lease lost: true
}

// Renew extends a held lease, here with a longer TTL than the lock took.
func ExampleLock_RenewTTL() {
	reg, err := registry.NewLocal()
	if err != nil {
		panic(err)
	}
	defer reg.Close(context.Background())

	ctx := context.Background()
	l := reg.Obtain("batch")
	if err := l.LockTTL(ctx, time.Second); err != nil {
		panic(err)
	}
	fmt.Println(l.RenewTTL(ctx, time.Minute))
	fmt.Println(l.UnlockContext(ctx))
	// Output:
	// <nil>
	// <nil>
}

// A readiness probe: not ready while the storage cannot serve locks, ready
// (but slower to hand locks over) while only the listener reconnects.
func ExampleRegistry_Check() {
	reg, err := registry.NewLocal() // registry.New(jdbcRepository) in production
	if err != nil {
		panic(err)
	}
	ready := func(ctx context.Context) bool {
		err := reg.Check(ctx)
		return err == nil || errors.Is(err, registry.ErrListenerDown)
	}
	fmt.Println("ready:", ready(context.Background()))
	reg.Close(context.Background())
	fmt.Println("ready after Close:", ready(context.Background()))
	// Output:
	// ready: true
	// ready after Close: false
}

package jdbc_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"
	"time"

	_ "modernc.org/sqlite"

	"github.com/lockreg/lockreg/jdbc"
	"github.com/lockreg/lockreg/registry"
)

func Example() {
	dir, err := os.MkdirTemp("", "lockreg-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "locks.db")+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()

	// Create INT_LOCK once; doing it again is harmless.
	if err := jdbc.CreateSchema(ctx, db); err != nil {
		log.Fatal(err)
	}

	// Two clients of one lock table, as two processes would be.
	alice, err := jdbc.NewLockRepository(ctx, db, jdbc.WithRegion("orders"))
	if err != nil {
		log.Fatal(err)
	}
	defer alice.Close(ctx)
	bob, err := jdbc.NewLockRepository(ctx, db, jdbc.WithRegion("orders"))
	if err != nil {
		log.Fatal(err)
	}
	defer bob.Close(ctx)

	_, ok, err := alice.Acquire(ctx, "order-42", 30*time.Second)
	fmt.Println("alice acquires:", ok, err)
	_, ok, err = bob.Acquire(ctx, "order-42", 30*time.Second)
	fmt.Println("bob acquires while alice holds it:", ok, err)

	fmt.Println("alice releases:", alice.Release(ctx, "order-42"))
	_, ok, err = bob.Acquire(ctx, "order-42", 30*time.Second)
	fmt.Println("bob acquires:", ok, err)
	fmt.Println("bob releases:", bob.Release(ctx, "order-42"))
	// Output:
	// alice acquires: true <nil>
	// bob acquires while alice holds it: false <nil>
	// alice releases: <nil>
	// bob acquires: true <nil>
	// bob releases: <nil>
}

func ExampleCreateSchema() {
	dir, err := os.MkdirTemp("", "lockreg-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "locks.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()

	repo, err := jdbc.NewLockRepository(ctx, db, jdbc.WithPrefix("APP_"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("table missing before:", errors.Is(repo.Check(ctx), jdbc.ErrNoTable))

	// The same options: CreateSchema creates APP_LOCK for the detected dialect.
	if err := jdbc.CreateSchema(ctx, db, jdbc.WithPrefix("APP_")); err != nil {
		log.Fatal(err)
	}
	fmt.Println("check after:", repo.Check(ctx))
	// Output:
	// table missing before: true
	// check after: <nil>
}

func ExampleUUIDKey() {
	fmt.Println(jdbc.UUIDKey("foo"))
	fmt.Println(jdbc.UUIDKey("3F2504E0-4F89-41D3-9A0C-0305E82C3301"))
	// Output:
	// acbd18db-4cc2-385c-adef-654fccc4a4d8
	// 3f2504e0-4f89-41d3-9a0c-0305e82c3301
}

// An operator's view of the lock table: who holds what, and a forced
// release of a dead holder's lease.
func ExampleAdmin() {
	dir, err := os.MkdirTemp("", "lockreg-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "locks.db")+"?_pragma=busy_timeout(5000)")
	if err != nil {
		panic(err)
	}
	defer db.Close()
	ctx := context.Background()
	if err := jdbc.CreateSchema(ctx, db); err != nil {
		panic(err)
	}
	repo, err := jdbc.NewLockRepository(ctx, db, jdbc.WithApplicationName("billing"), jdbc.WithoutCleanup())
	if err != nil {
		panic(err)
	}
	defer repo.Close(ctx)
	repo.Acquire(ctx, "orders/42", time.Minute)

	admin, err := jdbc.NewAdmin(db)
	if err != nil {
		panic(err)
	}
	leases, err := admin.Leases(ctx, jdbc.LeaseFilter{State: jdbc.HeldLeases, NamePrefix: "orders/"})
	if err != nil {
		panic(err)
	}
	for _, l := range leases {
		fmt.Println(l.Name, l.Held, strings.HasSuffix(l.Holder, " app=billing"))
	}
	released, err := admin.ForceRelease(ctx, "DEFAULT", "orders/42")
	fmt.Println("released:", released, err)
	// Output:
	// orders/42 true true
	// released: true <nil>
}

// A table shared with Spring Integration 5.4-6.x applications (Spring Boot
// 2.4 to 3.x), whose INT_LOCK has no EXPIRED_AFTER: the layout is detected,
// and the TTL is the Spring registries'.
func ExampleWithLayout() {
	dir, err := os.MkdirTemp("", "lockreg-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "locks.db")+"?_pragma=busy_timeout(5000)")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()

	// Here lockreg creates the table in Spring 6's layout; on a table
	// Spring created, CreateSchema only adds lockreg's FENCE column.
	if err := jdbc.CreateSchema(ctx, db, jdbc.WithLayout(jdbc.LayoutSpring6)); err != nil {
		log.Fatal(err)
	}
	repo, err := jdbc.NewLockRepository(ctx, db, jdbc.WithSpring6TTL(30*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer repo.Close(ctx)
	fmt.Println("layout:", repo.Layout())

	_, ok, err := repo.Acquire(ctx, "order-42", 30*time.Second)
	fmt.Println("acquired:", ok, err)
	_, _, err = repo.Acquire(ctx, "order-43", time.Minute)
	fmt.Println("longer than the table TTL:", errors.Is(err, registry.ErrInvalidTTL))
	// Output:
	// layout: spring6
	// acquired: true <nil>
	// longer than the table TTL: true
}

// Goroutines that lock keys of their own share statements on PostgreSQL:
// acquisitions and releases that arrive while one of their kind is in
// flight run together in the next one, one commit for all of them. Here two
// statements of each kind may run at once; WithGroupCommit(-1) would send
// one per key. (Not run: it needs a PostgreSQL server.)
func ExampleWithGroupCommit() {
	ctx := context.Background()
	db, err := sql.Open("pgx", "postgres://localhost:5432/app")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(8)
	db.SetMaxIdleConns(8) // keep the connections the bursts use
	repo, err := jdbc.NewLockRepository(ctx, db, jdbc.WithGroupCommit(2))
	if err != nil {
		log.Fatal(err)
	}
	locks, err := registry.New(repo)
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close(ctx)
	done := make(chan error)
	for i := range 16 {
		go func() {
			l := locks.Obtain(fmt.Sprintf("account-%d", i))
			err := l.LockContext(ctx)
			if err == nil {
				err = l.UnlockContext(ctx)
			}
			done <- err
		}()
	}
	for range 16 {
		if err := <-done; err != nil {
			log.Print(err)
		}
	}
}

//go:build chaos

package chaos

import (
	"context"
	"errors"
	"net/url"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/lockreg/lockreg/internal/testdb"
	"github.com/lockreg/lockreg/jdbc"
	"github.com/lockreg/lockreg/leader"
	"github.com/lockreg/lockreg/registry"
)

// A leader cut off from the database by a partition ends its term (its
// context is done, IsLeader is false) while its lease is still unexpired
// by the database's clock, and before a candidate on the other side of the
// partition is granted, which happens only once that lease has expired,
// with a greater token. When the partition heals and the new leader
// closes, the old one leads again.
func TestAPartitionedLeaderEndsItsTermBeforeAnotherIsGranted(t *testing.T) {
	const (
		ttl  = 5 * time.Second
		role = "partitioned-leader"
	)
	for _, b := range serverBackends(t) {
		t.Run(b.Name, func(t *testing.T) {
			b.Require(t)
			run := newRun()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()

			p := startProxy(t, serverAddr(t, b))
			cutOff := b
			cutOff.DB = testdb.OpenPool(t, b.Driver, proxiedDSN(t, b, p.Addr()))
			idle := registry.WithIdleBetweenTries(50 * time.Millisecond)
			a := newCandidate(t, newRegistry(t, cutOff, run, idle), role,
				leader.WithTTL(ttl), leader.WithBusyWait(100*time.Millisecond))
			termA, err := a.Wait(ctx)
			if err != nil {
				t.Fatal(err)
			}
			endedFirst := make(chan bool, 1) // whether a's term had ended when b was granted
			c := newCandidate(t, newRegistry(t, b, run, idle), role, leader.WithTTL(ttl),
				leader.OnGranted(func(*leader.Term) {
					select {
					case endedFirst <- termA.Context().Err() != nil:
					default:
					}
				}))

			p.Cut()
			select {
			case <-termA.Context().Done():
			case <-ctx.Done():
				t.Fatal("the partitioned leader's term did not end")
			}
			now, err := b.Clock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if a.IsLeader() {
				t.Error("the partitioned candidate leads after its term ended")
			}
			if cause := context.Cause(termA.Context()); !errors.Is(cause, registry.ErrLockLost) {
				t.Errorf("cause %v, want one wrapping registry.ErrLockLost", cause)
			}
			last := b.MustLease(t, run, role) // final: the leader cannot reach the database
			if last.Fence != termA.Token() {
				t.Fatalf("the lease carries token %d, not the partitioned leader's %d: read too late", last.Fence, termA.Token())
			}
			if now >= last.Expires {
				t.Errorf("the term ended %v after the lease expired by the database's clock",
					time.Duration(now-last.Expires)*time.Microsecond)
			}

			select {
			case ok := <-endedFirst:
				if !ok {
					t.Error("the other candidate was granted before the partitioned leader's term ended")
				}
			case <-ctx.Done():
				t.Fatal("the other candidate was not granted")
			}
			termC := c.Term()
			if termC == nil {
				t.Fatal("the other candidate does not lead")
			}
			// jdbc's token is the database's clock, in microseconds, when
			// the acquisition ran (or the last token plus one, if greater).
			if termC.Token() < last.Expires {
				t.Errorf("the other candidate acquired the lease %v before the partitioned leader's expired",
					time.Duration(last.Expires-termC.Token())*time.Microsecond)
			}

			p.Heal()
			if err := c.Close(ctx); err != nil {
				t.Fatal(err)
			}
			again, err := a.Wait(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if again.Token() <= termC.Token() {
				t.Errorf("the healed candidate's token %d is not greater than %d", again.Token(), termC.Token())
			}
			t.Logf("%s: the partitioned leader's term ended %v before its lease expired by the database's clock; "+
				"the other candidate acquired %v after the expiry; after healing the first leads again",
				b.Name, (time.Duration(last.Expires-now) * time.Microsecond).Round(time.Millisecond),
				(time.Duration(termC.Token()-last.Expires) * time.Microsecond).Round(time.Millisecond))
		})
	}
}

// newCandidate returns a candidate for role on locks, closed when t ends
// (before its registry).
func newCandidate(t *testing.T, locks registry.LockRegistry, role string, opts ...leader.Option) *leader.Candidate {
	t.Helper()
	opts = append([]leader.Option{leader.WithErrorHandler(func(error) {})}, opts...)
	c, err := leader.New(locks, role, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := c.Close(ctx); err != nil {
			t.Error(err)
		}
	})
	return c
}

// serverAddr is the host:port of b's server.
func serverAddr(t *testing.T, b testdb.Backend) string {
	t.Helper()
	if b.Dialect == jdbc.MySQL {
		cfg, err := mysql.ParseDSN(b.DSN)
		if err != nil {
			t.Fatal(err)
		}
		return cfg.Addr
	}
	u, err := url.Parse(b.DSN)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// proxiedDSN is b's DSN with the server's address replaced by addr.
func proxiedDSN(t *testing.T, b testdb.Backend, addr string) string {
	t.Helper()
	if b.Dialect == jdbc.MySQL {
		cfg, err := mysql.ParseDSN(b.DSN)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Addr = addr
		return cfg.FormatDSN()
	}
	u, err := url.Parse(b.DSN)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = addr
	return u.String()
}

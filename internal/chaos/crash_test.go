//go:build chaos

package chaos

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/lockreg/lockreg/registry"
)

// A process killed with SIGKILL while it holds a lock never releases it;
// another process takes the key once the lease has expired by the
// database's clock, never before, and soon after.
func TestAHolderKilledMidHoldLosesTheKeyOnlyWhenItsLeaseExpires(t *testing.T) {
	const (
		ttl  = 2 * time.Second
		idle = 100 * time.Millisecond
		// margin is generous: a loaded 2-core machine running the race
		// detector; only "never before expiry" is asserted strictly.
		margin = 5 * time.Second
	)
	for _, b := range allBackends(t) {
		t.Run(b.Name, func(t *testing.T) {
			b.Require(t)
			for round := range scale(1) {
				run := newRun()
				key := "crash"

				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				cmd := child{mode: "hold", b: b, run: run, keys: []string{key}, workers: 1, ttl: ttl}.command(ctx)
				out, err := cmd.StdoutPipe()
				if err != nil {
					t.Fatal(err)
				}
				var stderr limitedBuffer
				cmd.Stderr = &stderr
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				crashedToken, err := readHeld(out)
				if err != nil {
					cmd.Process.Kill()
					cmd.Wait()
					t.Fatalf("%v\n%s", err, stderr.String())
				}
				if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
				killed := time.Now()
				if err := cmd.Wait(); err == nil || !isKilled(err) {
					t.Fatalf("the child was not killed: %v", err)
				}
				crashed := b.MustLease(t, run, key)
				if crashed.Fence != crashedToken {
					t.Fatalf("the lease row carries token %d, the killed holder had %d", crashed.Fence, crashedToken)
				}

				reg := newRegistry(t, b, run, registry.WithTTL(ttl), registry.WithIdleBetweenTries(idle))
				l := reg.Obtain(key)
				if err := l.LockContext(ctx); err != nil {
					t.Fatal(err)
				}
				waited := time.Since(killed)
				next := b.MustLease(t, run, key)
				acquiredAt := next.Expires - ttl.Microseconds() // the acquire statement set EXPIRED_AFTER = now + ttl
				if acquiredAt < crashed.Expires {
					t.Errorf("acquired at %d by the database's clock, %v before the killed holder's lease expired at %d",
						acquiredAt, time.Duration(crashed.Expires-acquiredAt)*time.Microsecond, crashed.Expires)
				}
				if next.ClientID == crashed.ClientID {
					t.Errorf("the new lease belongs to the killed client %s", next.ClientID)
				}
				token := l.Token()
				if token <= crashedToken {
					t.Errorf("token %d after the crash is not greater than the killed holder's %d", token, crashedToken)
				}
				if waited > ttl+idle+margin {
					t.Errorf("took %v after the kill to acquire, more than TTL %v + idle %v + %v", waited, ttl, idle, margin)
				}
				if err := l.UnlockContext(ctx); err != nil {
					t.Error(err)
				}
				t.Logf("%s round %d: holder (token %d) killed with SIGKILL; next process acquired %v after the kill, "+
					"%v after the lease's expiry by the database's clock (token %d)", b.Name, round, crashedToken,
					waited.Round(time.Millisecond), (time.Duration(acquiredAt-crashed.Expires) * time.Microsecond).Round(time.Millisecond), token)
			}
		})
	}
}

func isKilled(err error) bool {
	var ee interface{ Sys() any }
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

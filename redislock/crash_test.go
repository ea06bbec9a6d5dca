package redislock_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockreg/lockreg/internal/testdb"
	"github.com/lockreg/lockreg/redislock"
	"github.com/lockreg/lockreg/registry"
)

// The child process's settings.
const (
	regionEnv = "LOCKREG_REDISLOCK_REGION"
	keyEnv    = "LOCKREG_REDISLOCK_KEY"
	ttlEnv    = "LOCKREG_REDISLOCK_TTL"
)

// TestHelperProcess is the body of a child process of the other tests;
// run directly it does nothing. As "hold" it takes a lock on the shared
// server, prints "HELD token client-id" and waits to be killed.
func TestHelperProcess(t *testing.T) {
	mode := os.Getenv(helperEnv)
	if mode == "" {
		t.Skip("requires being run as a child process of the other tests")
	}
	err := fmt.Errorf("unknown helper mode %q", mode)
	if mode == "hold" {
		err = childHold()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "child %s: %v\n", mode, err)
		os.Exit(2)
	}
	os.Exit(0)
}

func childHold() error {
	ttl, err := time.ParseDuration(os.Getenv(ttlEnv))
	if err != nil {
		return err
	}
	c := redis.NewClient(testdb.RedisOptions())
	repo, err := redislock.New(c, redislock.WithRegion(os.Getenv(regionEnv)))
	if err != nil {
		return err
	}
	reg, err := registry.New(repo, registry.WithTTL(ttl))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l := reg.Obtain(os.Getenv(keyEnv))
	if err := l.LockContext(ctx); err != nil {
		return err
	}
	fmt.Printf("HELD %d %s\n", l.Token(), repo.ClientID())
	time.Sleep(time.Hour) // until SIGKILL
	return nil
}

// A process killed with SIGKILL while it holds a lock never releases it:
// another process takes the key once the lease has expired by Redis'
// clock, never before, with a greater token.
func TestAHolderKilledMidHoldLosesTheKeyOnlyWhenItsLeaseExpires(t *testing.T) {
	const ttl = 2 * time.Second
	c := testdb.Redis(t, "")
	ctx := ctxT(t)
	region, key := randomRegion(), "crash"
	lk := lockKey(redislock.DefaultPrefix, region, key)

	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"=hold", regionEnv+"="+region, keyEnv+"="+key, ttlEnv+"="+ttl.String())
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var crashedToken int64
	var crashedClient string
	line, err := bufio.NewReader(out).ReadString('\n')
	if err == nil {
		_, err = fmt.Sscanf(line, "HELD %d %s", &crashedToken, &crashedClient)
	}
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("the child's report %q: %v", line, err)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); !isKilled(err) {
		t.Fatalf("the child was not killed: %v", err)
	}
	killed := time.Now()
	// By Redis' clock, in ms; the child cannot have renewed it since.
	crashedExpiry, err := c.PExpireTime(ctx, lk).Result()
	if err != nil {
		t.Fatal(err)
	}
	if owner, _ := c.Get(ctx, lk).Result(); owner != crashedClient {
		t.Fatalf("the lock key holds %q, the killed holder was %q", owner, crashedClient)
	}

	repo := newRepo(t, c, redislock.WithRegion(region))
	reg := newRegistry(t, repo, registry.WithTTL(ttl), registry.WithIdleBetweenTries(100*time.Millisecond))
	l := reg.Obtain(key)
	if err := l.LockContext(ctx); err != nil {
		t.Fatal(err)
	}
	waited := time.Since(killed)
	expiry, err := c.PExpireTime(ctx, lk).Result()
	if err != nil {
		t.Fatal(err)
	}
	// The acquire script set the expiry to its start + ttl, by the server's clock.
	if acquiredAt := expiry.Milliseconds() - ttl.Milliseconds(); acquiredAt <= crashedExpiry.Milliseconds() {
		t.Errorf("acquired at %d ms by Redis' clock, not after the killed holder's lease expired at %d ms",
			acquiredAt, crashedExpiry.Milliseconds())
	}
	if owner, _ := c.Get(ctx, lk).Result(); owner != repo.ClientID() {
		t.Errorf("the lock key holds %q after the takeover, want %q", owner, repo.ClientID())
	}
	if token := l.Token(); token <= crashedToken {
		t.Errorf("token %d after the crash is not greater than the killed holder's %d", token, crashedToken)
	}
	if err := l.UnlockContext(ctx); err != nil {
		t.Error(err)
	}
	t.Logf("holder (token %d) killed with SIGKILL; the next process acquired %v after the kill (TTL %v)",
		crashedToken, waited.Round(time.Millisecond), ttl)
}

func isKilled(err error) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

package registry_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockreg/lockreg/registry"
	"github.com/lockreg/lockreg/registry/registrytest"
)

// announcer stands for a lock table whose releases are announced to the
// clients that listen, as PostgreSQL's NOTIFY does for package jdbc.
type announcer struct {
	mu   sync.Mutex
	subs map[chan<- struct{}]bool
}

// announced is a client of the memory table whose releases the announcer
// announces; it logs its calls.
type announced struct {
	registry.Repository
	a *announcer

	mu  sync.Mutex
	log []string
}

func (c *announced) record(s string) {
	c.mu.Lock()
	c.log = append(c.log, s)
	c.mu.Unlock()
}

func (c *announced) takeLog() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	l := c.log
	c.log = nil
	return l
}

func (c *announced) Acquire(ctx context.Context, key string, ttl time.Duration) (registry.Lease, bool, error) {
	l, ok, err := c.Repository.Acquire(ctx, key, ttl)
	c.record(fmt.Sprintf("acquire %v", ok))
	return l, ok, err
}

func (c *announced) Release(ctx context.Context, key string) error {
	err := c.Repository.Release(ctx, key)
	c.a.mu.Lock()
	for s := range c.a.subs {
		select {
		case s <- struct{}{}:
		default:
		}
	}
	c.a.mu.Unlock()
	return err
}

func (c *announced) Notify(key string, ch chan<- struct{}) func() {
	c.record("subscribe")
	c.a.mu.Lock()
	c.a.subs[ch] = true
	c.a.mu.Unlock()
	return func() {
		c.a.mu.Lock()
		delete(c.a.subs, ch)
		c.a.mu.Unlock()
	}
}

// TestAnAcquisitionOfAKeyContendedLastTimeSubscribesBeforeItsFirstAttempt
// checks that a waiter of a key it found held the last time listens for
// releases before it asks, and so asks once before it waits where the
// first contended acquisition asks twice (its subscription came after a
// failed attempt, which a release in between would have gone unheard by).
func TestAnAcquisitionOfAKeyContendedLastTimeSubscribesBeforeItsFirstAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := registrytest.NewMemory()
		a := &announcer{subs: map[chan<- struct{}]bool{}}
		waiterRepo := &announced{Repository: m.NewClient(), a: a}
		holderRepo := &announced{Repository: m.NewClient(), a: a}
		// No polling: a waiter only hears announcements.
		waiter := newReg(t, waiterRepo, registry.WithIdleBetweenTries(time.Hour)).Obtain("k")
		holder := newReg(t, holderRepo, registry.WithIdleBetweenTries(time.Hour)).Obtain("k")
		ctx := context.Background()

		var want [][]string
		for range 2 {
			if err := holder.LockContext(ctx); err != nil {
				t.Fatal(err)
			}
			waiterRepo.takeLog()
			locked := make(chan error)
			go func() { locked <- waiter.LockContext(ctx) }()
			synctest.Wait()
			if err := holder.UnlockContext(ctx); err != nil {
				t.Fatal(err)
			}
			if err := <-locked; err != nil {
				t.Fatal(err)
			}
			want = append(want, waiterRepo.takeLog())
			if err := waiter.UnlockContext(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if first := []string{"acquire false", "subscribe", "acquire false", "acquire true"}; !slices.Equal(want[0], first) {
			t.Errorf("first contended acquisition: calls %q, want %q", want[0], first)
		}
		if second := []string{"subscribe", "acquire false", "acquire true"}; !slices.Equal(want[1], second) {
			t.Errorf("second contended acquisition: calls %q, want %q", want[1], second)
		}
	})
}

// TestAnUncontendedAcquisitionDoesNotSubscribe checks that a key whose
// last acquisition found it free costs no subscription.
func TestAnUncontendedAcquisitionDoesNotSubscribe(t *testing.T) {
	m := registrytest.NewMemory()
	repo := &announced{Repository: m.NewClient(), a: &announcer{subs: map[chan<- struct{}]bool{}}}
	l := newReg(t, repo).Obtain("k")
	for range 3 {
		if err := l.LockContext(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := l.UnlockContext(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := repo.takeLog(), []string{"acquire true", "acquire true", "acquire true"}; !slices.Equal(got, want) {
		t.Errorf("calls %q, want %q", got, want)
	}
}

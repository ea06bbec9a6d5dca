package leader_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/lockreg/lockreg/leader"
	"github.com/lockreg/lockreg/registry"
	"github.com/lockreg/lockreg/registry/registrytest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Four candidates, each an instance with its own client of shared
// storage, hand the leadership around by yielding: no two terms overlap
// (each is granted after the previous one was revoked), and the tokens of
// successive terms increase.
func TestOneCandidateLeadsAtATimeAcrossYields(t *testing.T) {
	mem := registrytest.NewMemory()
	r := newRotation(t, 40)
	for i := range 4 {
		reg := newRegistry(t, mem.NewClient())
		newCandidate(t, reg, "overlap", append(r.options(i, time.Millisecond), leader.WithBusyWait(10*time.Millisecond))...)
	}
	r.check()
}

// A candidate that yields ends its term (its context's cause is
// ErrYielded), and another candidate leads.
func TestYieldLetsAnotherCandidateLead(t *testing.T) {
	mem := registrytest.NewMemory()
	a := newCandidate(t, newRegistry(t, mem.NewClient()), "yield", leader.WithBusyWait(patience))
	term := waitLead(t, a)
	b := newCandidate(t, newRegistry(t, mem.NewClient()), "yield")
	if err := a.Yield(); err != nil {
		t.Fatal(err)
	}
	waitDone(t, term.Context(), "after Yield")
	if cause := context.Cause(term.Context()); !errors.Is(cause, leader.ErrYielded) {
		t.Errorf("cause %v, want ErrYielded", cause)
	}
	waitLead(t, b)
	if a.IsLeader() {
		t.Error("the candidate that yielded still leads")
	}
}

// Yield of a candidate that does not lead returns ErrNotLeader.
func TestYieldWhenNotLeadingReturnsErrNotLeader(t *testing.T) {
	mem := registrytest.NewMemory()
	a := newCandidate(t, newRegistry(t, mem.NewClient()), "not-leading")
	waitLead(t, a)
	b := newCandidate(t, newRegistry(t, mem.NewClient()), "not-leading")
	if err := b.Yield(); !errors.Is(err, leader.ErrNotLeader) {
		t.Errorf("Yield: %v, want ErrNotLeader", err)
	}
}

// Close of the leader ends its term (cause ErrClosed) and releases the
// lease: another candidate leads long before the lease would expire.
func TestCloseReleasesTheLeadership(t *testing.T) {
	mem := registrytest.NewMemory()
	a, err := leader.New(newRegistry(t, mem.NewClient()), "close", leader.WithTTL(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	term := waitLead(t, a)
	b := newCandidate(t, newRegistry(t, mem.NewClient()), "close", leader.WithTTL(time.Hour))
	if err := a.Close(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if cause := context.Cause(term.Context()); !errors.Is(cause, leader.ErrClosed) {
		t.Errorf("cause %v, want ErrClosed", cause)
	}
	waitLead(t, b) // within patience, an hour short of the TTL
}

// Wait on a closed candidate returns ErrClosed.
func TestWaitAfterCloseReturnsErrClosed(t *testing.T) {
	c, err := leader.New(newRegistry(t, registrytest.NewMemory().NewClient()), "closed")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Wait(ctxT(t)); !errors.Is(err, leader.ErrClosed) {
		t.Errorf("Wait: %v, want ErrClosed", err)
	}
	if c.IsLeader() {
		t.Error("a closed candidate leads")
	}
}

// Wait returns ctx's error when ctx ends before the candidate leads.
func TestWaitReturnsWhenItsContextEnds(t *testing.T) {
	mem := registrytest.NewMemory()
	waitLead(t, newCandidate(t, newRegistry(t, mem.NewClient()), "busy"))
	b := newCandidate(t, newRegistry(t, mem.NewClient()), "busy")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := b.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Wait: %v, want context.Canceled", err)
	}
}

// The term of the next leader has a greater fencing token.
func TestTheNextTermHasAGreaterToken(t *testing.T) {
	mem := registrytest.NewMemory()
	a, err := leader.New(newRegistry(t, mem.NewClient()), "tokens")
	if err != nil {
		t.Fatal(err)
	}
	first := waitLead(t, a).Token()
	b := newCandidate(t, newRegistry(t, mem.NewClient()), "tokens")
	if err := a.Close(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if second := waitLead(t, b).Token(); second <= first {
		t.Errorf("token %d after %d", second, first)
	}
}

// The leader renews its lease: it leads through several TTLs and no other
// candidate is granted meanwhile.
func TestTheLeaderKeepsTheLeadershipByRenewing(t *testing.T) {
	const ttl = 300 * time.Millisecond
	mem := registrytest.NewMemory()
	repo := &faulty{Repository: mem.NewClient()}
	a := newCandidate(t, newRegistry(t, repo), "renew", leader.WithTTL(ttl))
	term := waitLead(t, a)
	var granted atomic.Bool
	newCandidate(t, newRegistry(t, mem.NewClient()), "renew", leader.WithTTL(ttl),
		leader.OnGranted(func(*leader.Term) { granted.Store(true) }))
	eventually(t, "ten renewals or the term's end", func() bool {
		return repo.renewed.Load() >= 10 || term.Context().Err() != nil
	})
	if term.Context().Err() != nil {
		t.Fatalf("the term ended: %v", context.Cause(term.Context()))
	}
	if granted.Load() {
		t.Error("another candidate was granted while the leader renewed")
	}
}

// Transient renewal errors, retried by the registry, do not end the term.
func TestTransientRenewalErrorsDoNotEndTheTerm(t *testing.T) {
	const ttl = time.Second
	mem := registrytest.NewMemory()
	repo := &faulty{Repository: mem.NewClient(), renew: func(_ context.Context, n int) error {
		if n <= 3 {
			return registry.Transient(errors.New("connection reset"))
		}
		return nil
	}}
	a := newCandidate(t, newRegistry(t, repo), "transient", leader.WithTTL(ttl))
	term := waitLead(t, a)
	eventually(t, "renewals after the failures, or the term's end", func() bool {
		return repo.renewed.Load() >= 3 || term.Context().Err() != nil
	})
	if term.Context().Err() != nil {
		t.Fatalf("the term ended: %v", context.Cause(term.Context()))
	}
}

// Other renewal errors, short of a lost lease, are reported and retried
// by the candidate; the term goes on once a renewal succeeds.
func TestFailedRenewalsAreRetried(t *testing.T) {
	const ttl = 2 * time.Second
	var log errorLog
	repo := &faulty{Repository: registrytest.NewMemory().NewClient(), renew: func(_ context.Context, n int) error {
		if n <= 2 {
			return errors.New("permission denied")
		}
		return nil
	}}
	a := newCandidate(t, newRegistry(t, repo), "retried", leader.WithTTL(ttl), leader.WithErrorHandler(log.handle))
	term := waitLead(t, a)
	eventually(t, "a renewal after the failures, or the term's end", func() bool {
		return repo.renewed.Load() >= 1 || term.Context().Err() != nil
	})
	if term.Context().Err() != nil {
		t.Fatalf("the term ended: %v", context.Cause(term.Context()))
	}
	if n := log.len(); n != 2 {
		t.Errorf("%d errors reported, want 2", n)
	}
}

// When a renewal hangs (the database is cut off), the term ends: IsLeader
// is false and the context is cancelled, with a cause wrapping
// registry.ErrLockLost, before another candidate is granted, which happens
// only once the lease has expired.
func TestATermWhoseRenewalHangsEndsBeforeTheNextIsGranted(t *testing.T) {
	const ttl = 3 * time.Second
	mem := registrytest.NewMemory()
	repo := &faulty{Repository: mem.NewClient(), renew: func(ctx context.Context, n int) error {
		if n > 1 {
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	}}
	a := newCandidate(t, newRegistry(t, repo), "hanging", leader.WithTTL(ttl), leader.WithBusyWait(patience),
		leader.WithErrorHandler(func(error) {}))
	term := waitLead(t, a)
	endedFirst := make(chan bool, 1) // whether a's term had ended when b was granted
	newCandidate(t, newRegistry(t, mem.NewClient()), "hanging", leader.WithTTL(ttl),
		leader.OnGranted(func(*leader.Term) { endedFirst <- term.Context().Err() != nil }))
	select {
	case ok := <-endedFirst:
		if !ok {
			t.Error("b was granted before a's term ended")
		}
	case <-time.After(patience):
		t.Fatal("b was not granted")
	}
	if a.IsLeader() {
		t.Error("IsLeader after the term ended")
	}
	if cause := context.Cause(term.Context()); !errors.Is(cause, registry.ErrLockLost) {
		t.Errorf("cause %v, want one wrapping registry.ErrLockLost", cause)
	}
}

// A renewal that finds the lease lost ends the term at once; the
// candidate competes again and leads again, with a greater token.
func TestALostLeaseEndsTheTermAndTheCandidateCompetesAgain(t *testing.T) {
	var lose atomic.Bool
	repo := &faulty{Repository: registrytest.NewMemory().NewClient(), renew: func(context.Context, int) error {
		if lose.CompareAndSwap(true, false) {
			return fmt.Errorf("gone: %w", registry.ErrLockLost)
		}
		return nil
	}}
	a := newCandidate(t, newRegistry(t, repo), "lost", leader.WithTTL(300*time.Millisecond),
		leader.WithBusyWait(time.Millisecond))
	first := waitLead(t, a)
	lose.Store(true) // the next renewal finds the lease lost
	waitDone(t, first.Context(), "lost lease")
	if cause := context.Cause(first.Context()); !errors.Is(cause, registry.ErrLockLost) {
		t.Errorf("cause %v, want one wrapping registry.ErrLockLost", cause)
	}
	second := waitLead(t, a)
	if second.Token() <= first.Token() {
		t.Errorf("token %d after %d", second.Token(), first.Token())
	}
}

// An attempt that fails with an error is reported and retried after the
// busy-wait interval.
func TestFailedAttemptsAreReportedAndRetried(t *testing.T) {
	var log errorLog
	repo := &faulty{Repository: registrytest.NewMemory().NewClient(), acquire: func(_ context.Context, n int) error {
		if n <= 2 {
			return errors.New("no such table")
		}
		return nil
	}}
	a := newCandidate(t, newRegistry(t, repo), "attempts", leader.WithBusyWait(time.Millisecond),
		leader.WithErrorHandler(log.handle))
	waitLead(t, a)
	if n := log.len(); n != 2 {
		t.Errorf("%d errors reported, want 2", n)
	}
}

// A candidate whose registry is closed stops competing: Wait returns an
// error wrapping registry.ErrClosed.
func TestACandidateStopsCompetingWhenItsRegistryCloses(t *testing.T) {
	mem := registrytest.NewMemory()
	waitLead(t, newCandidate(t, newRegistry(t, mem.NewClient()), "registry-closed"))
	reg, err := registry.New(mem.NewClient(), registry.WithIdleBetweenTries(5*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	b := newCandidate(t, reg, "registry-closed", leader.WithErrorHandler(func(error) {}))
	if err := reg.Close(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Wait(ctxT(t)); !errors.Is(err, registry.ErrClosed) {
		t.Errorf("Wait: %v, want one wrapping registry.ErrClosed", err)
	}
}

// The lease is released only after OnGranted and OnRevoked have returned:
// until then a probe finds it held, although the term has ended.
func TestTheLeaseIsReleasedAfterTheCallbacksReturn(t *testing.T) {
	mem := registrytest.NewMemory()
	probe := newRegistry(t, mem.NewClient()).Obtain("callbacks")
	held := func() bool {
		if probe.TryLock() {
			probe.Unlock()
			return false
		}
		return true
	}
	granted, revoked := make(chan struct{}), make(chan struct{})
	inGranted, inRevoked := make(chan struct{}), make(chan struct{})
	a := newCandidate(t, newRegistry(t, mem.NewClient()), "callbacks", leader.WithTTL(time.Hour),
		leader.WithBusyWait(patience),
		leader.OnGranted(func(term *leader.Term) {
			<-term.Context().Done()
			close(inGranted)
			<-granted
		}),
		leader.OnRevoked(func(*leader.Term) {
			close(inRevoked)
			<-revoked
		}))
	waitLead(t, a)
	if err := a.Yield(); err != nil {
		t.Fatal(err)
	}
	<-inGranted
	if !held() {
		t.Error("the lease was released while OnGranted ran")
	}
	close(granted)
	<-inRevoked
	if !held() {
		t.Error("the lease was released while OnRevoked ran")
	}
	close(revoked)
	eventually(t, "the release", func() bool { return !held() })
}

// New refuses bad arguments with ErrInvalidOption.
func TestNewRefusesInvalidArguments(t *testing.T) {
	reg := newRegistry(t, registrytest.NewMemory().NewClient())
	for _, tc := range []struct {
		name  string
		locks registry.LockRegistry
		role  string
		opts  []leader.Option
	}{
		{"nil registry", nil, "role", nil},
		{"empty role", reg, "", nil},
		{"zero TTL", reg, "role", []leader.Option{leader.WithTTL(0)}},
		{"negative busy wait", reg, "role", []leader.Option{leader.WithBusyWait(-time.Second)}},
		{"nil error handler", reg, "role", []leader.Option{leader.WithErrorHandler(nil)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := leader.New(tc.locks, tc.role, tc.opts...)
			if !errors.Is(err, leader.ErrInvalidOption) {
				t.Errorf("New: %v, want ErrInvalidOption", err)
			}
			if c != nil {
				c.Close(ctxT(t))
			}
		})
	}
}

// shortLease hands out leases with only part of the TTL left, as a
// release on PostgreSQL hands a waiter what remains of the lease.
type shortLease struct {
	registry.Repository
	left time.Duration
}

func (s shortLease) Acquire(ctx context.Context, key string, ttl time.Duration) (registry.Lease, bool, error) {
	lease, ok, err := s.Repository.Acquire(ctx, key, ttl)
	lease.TTL = s.left
	return lease, ok, err
}

// A lease granted with less than the TTL left (handed over late) is
// renewed at once, before its safety margin, so the term goes on.
func TestALeaseGrantedWithLittleTimeLeftIsRenewedAtOnce(t *testing.T) {
	const ttl = 3 * time.Second
	repo := &faulty{Repository: shortLease{registrytest.NewMemory().NewClient(), ttl / 3}}
	a := newCandidate(t, newRegistry(t, repo), "short", leader.WithTTL(ttl))
	term := waitLead(t, a)
	eventually(t, "two renewals or the term's end", func() bool {
		return repo.renewed.Load() >= 2 || term.Context().Err() != nil
	})
	if term.Context().Err() != nil {
		t.Fatalf("the term ended: %v", context.Cause(term.Context()))
	}
}

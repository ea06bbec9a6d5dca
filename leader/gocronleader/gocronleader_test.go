package gocronleader_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-co-op/gocron/v2"
	"go.uber.org/goleak"

	"github.com/lockreg/lockreg/leader"
	"github.com/lockreg/lockreg/leader/gocronleader"
	"github.com/lockreg/lockreg/registry"
	"github.com/lockreg/lockreg/registry/registrytest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const patience = time.Minute

// instance is one instance of a service: a registry with its own client
// of mem and a candidate for role.
func instance(t *testing.T, mem *registrytest.Memory, role string) *leader.Candidate {
	t.Helper()
	reg, err := registry.New(mem.NewClient(), registry.WithIdleBetweenTries(5*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	c, err := leader.New(reg, role)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), patience)
		defer cancel()
		if err := c.Close(ctx); err != nil {
			t.Error(err)
		}
		if err := reg.Close(ctx); err != nil {
			t.Error(err)
		}
	})
	return c
}

// scheduler starts a gocron scheduler elected by c with one job, every
// 20 ms, that counts its runs; it is shut down when t ends.
func scheduler(t *testing.T, c *leader.Candidate, runs *atomic.Int64) {
	t.Helper()
	s, err := gocron.NewScheduler(gocron.WithDistributedElector(gocronleader.New(c)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.NewJob(gocron.DurationJob(20*time.Millisecond), gocron.NewTask(func() { runs.Add(1) }),
		gocron.WithName("report")); err != nil {
		t.Fatal(err)
	}
	s.Start()
	t.Cleanup(func() {
		if err := s.Shutdown(); err != nil {
			t.Error(err)
		}
	})
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Two schedulers, standing for two instances, run the same job every
// 20 ms: only the leader's runs it; once the leader is closed, the other
// instance leads and its scheduler runs the job, and the old leader's
// runs it no more.
func TestOnlyTheLeadersSchedulerRunsTheJob(t *testing.T) {
	mem := registrytest.NewMemory()
	a := instance(t, mem, "scheduler")
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	if _, err := a.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	b := instance(t, mem, "scheduler")
	var runsA, runsB atomic.Int64
	scheduler(t, a, &runsA)
	scheduler(t, b, &runsB)

	eventually(t, "three runs on the leader", func() bool { return runsA.Load() >= 3 })
	if n := runsB.Load(); n != 0 {
		t.Errorf("the follower's scheduler ran the job %d times", n)
	}

	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, "three runs on the new leader", func() bool { return runsB.Load() >= 3 })
	ranA, ranB := runsA.Load(), runsB.Load()
	eventually(t, "three more runs on the new leader", func() bool { return runsB.Load() >= ranB+3 })
	if n := runsA.Load() - ranA; n != 0 {
		t.Errorf("the old leader's scheduler ran the job %d times after it was closed", n)
	}
}

// The elector reports ErrNotLeader for a candidate that does not lead.
func TestTheElectorOfAFollowerReportsErrNotLeader(t *testing.T) {
	mem := registrytest.NewMemory()
	a := instance(t, mem, "elector")
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	if _, err := a.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	b := instance(t, mem, "elector")
	if err := gocronleader.New(a).IsLeader(ctx); err != nil {
		t.Errorf("the leader's elector: %v", err)
	}
	if err := gocronleader.New(b).IsLeader(ctx); !errors.Is(err, leader.ErrNotLeader) {
		t.Errorf("the follower's elector: %v, want ErrNotLeader", err)
	}
}

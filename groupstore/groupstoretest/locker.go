package groupstoretest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lockreg/lockreg/groupstore"
)

// runLocker runs, for a store that is a [groupstore.Locker], the tests of
// Locked and the whole suite again with every call in a Locked call of its
// own (so that the store fn gets passes it too).
func runLocker(t *testing.T, newStore func(t *testing.T) groupstore.Store) {
	for _, tc := range []struct {
		name string
		test func(t *testing.T, s groupstore.Locker)
	}{
		{"LockedCallsCommitTogether", testLockedCommits},
		{"LockedErrorUndoesEveryCall", testLockedUndoes},
		{"LockedCallsOnOneGroupTakeTurns", testLockedTurns},
		{"AddWaitsForLockedCallOnItsGroup", testAddTakesTurns},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.test(t, newStore(t).(groupstore.Locker)) })
	}
	t.Run("InLocked", func(t *testing.T) {
		Run(t, func(t *testing.T) groupstore.Store { return inLocked{newStore(t).(groupstore.Locker)} })
	})
}

// inLocked is a store each of whose calls is a Locked call of its own.
type inLocked struct{ l groupstore.Locker }

func (s inLocked) Add(ctx context.Context, key string, m groupstore.Message, timeout time.Duration) (g groupstore.Group, o groupstore.Outcome, err error) {
	err = s.l.Locked(ctx, key, func(ctx context.Context, tx groupstore.Store) (err error) {
		g, o, err = tx.Add(ctx, key, m, timeout)
		return err
	})
	return g, o, err
}

func (s inLocked) Get(ctx context.Context, key string) (g groupstore.Group, err error) {
	err = s.l.Locked(ctx, key, func(ctx context.Context, tx groupstore.Store) (err error) {
		g, err = tx.Get(ctx, key)
		return err
	})
	return g, err
}

func (s inLocked) Update(ctx context.Context, key string, u groupstore.Update) error {
	return s.l.Locked(ctx, key, func(ctx context.Context, tx groupstore.Store) error { return tx.Update(ctx, key, u) })
}

func (s inLocked) Remove(ctx context.Context, key string, version int64) error {
	return s.l.Locked(ctx, key, func(ctx context.Context, tx groupstore.Store) error { return tx.Remove(ctx, key, version) })
}

func (s inLocked) ClaimDue(ctx context.Context, limit int, lease time.Duration) ([]groupstore.DueGroup, error) {
	return s.l.ClaimDue(ctx, limit, lease)
}

func testLockedCommits(t *testing.T, s groupstore.Locker) {
	err := s.Locked(ctx, "together", func(ctx context.Context, tx groupstore.Store) error {
		for _, id := range []string{"m1", "m2"} {
			if _, o, err := tx.Add(ctx, "together", msg(id), 0); err != nil || o != groupstore.Added {
				return fmt.Errorf("Add(%s) = %v, %v", id, o, err)
			}
		}
		g, err := tx.Get(ctx, "together")
		if err != nil {
			return err
		}
		return tx.Update(ctx, "together", groupstore.Update{IfVersion: g.Version, Release: []string{"m1"}})
	})
	if err != nil {
		t.Fatalf("Locked: %v", err)
	}
	if g := get(t, s, "together"); len(g.Messages) != 1 || g.Messages[0].UUID != "m2" || g.Releases != 1 {
		t.Errorf("after Locked: %v, %d releases; want [m2] and 1 release", ids(g), g.Releases)
	}
}

func testLockedUndoes(t *testing.T, s groupstore.Locker) {
	mustAdd(t, s, "undo", "m1")
	boom := errors.New("boom")
	err := s.Locked(ctx, "undo", func(ctx context.Context, tx groupstore.Store) error {
		if _, _, err := tx.Add(ctx, "undo", msg("m2"), 0); err != nil {
			return err
		}
		if err := tx.Update(ctx, "undo", groupstore.Update{ReleaseAll: true, Complete: true}); err != nil {
			return err
		}
		if _, _, err := tx.Add(ctx, "new-in-undo", msg("n1"), 0); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Locked = %v, want fn's error", err)
	}
	if g := get(t, s, "undo"); g.Complete || len(g.Messages) != 1 || g.Messages[0].UUID != "m1" {
		t.Errorf("after a failed Locked: complete %v, messages %v; want the group as it was, [m1]", g.Complete, ids(g))
	}
	if _, err := s.Get(ctx, "new-in-undo"); !errors.Is(err, groupstore.ErrNotFound) {
		t.Errorf("a group created in a failed Locked: Get = %v, want ErrNotFound", err)
	}
}

// testLockedTurns has Locked calls read the group, and set its last
// released sequence one higher conditional on the version read: any two
// that overlapped would conflict.
func testLockedTurns(t *testing.T, s groupstore.Locker) {
	const n = 8
	mustAdd(t, s, "turns", "m1")
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Go(func() {
			errs <- s.Locked(ctx, "turns", func(ctx context.Context, tx groupstore.Store) error {
				g, err := tx.Get(ctx, "turns")
				if err != nil {
					return err
				}
				return tx.Update(ctx, "turns", groupstore.Update{IfVersion: g.Version,
					SetLastReleasedSequence: true, LastReleasedSequence: g.LastReleasedSequence + 1})
			})
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if g := get(t, s, "turns"); g.LastReleasedSequence != n {
		t.Errorf("last released sequence %d after %d increments, want %d", g.LastReleasedSequence, n, n)
	}
}

// testAddTakesTurns completes a group in a Locked call while Adds of new
// messages run: each Add is either in the group before the Locked call
// read it (and released with it) or rejected after, never kept unreleased
// in the complete group.
func testAddTakesTurns(t *testing.T, s groupstore.Locker) {
	const n = 8
	mustAdd(t, s, "race", "m0")
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		results = map[string]groupstore.Outcome{}
	)
	for i := range n {
		wg.Go(func() {
			id := fmt.Sprintf("m%d", i+1)
			_, o, err := s.Add(ctx, "race", msg(id), 0)
			if err != nil {
				t.Errorf("Add(%s): %v", id, err)
			}
			mu.Lock()
			results[id] = o
			mu.Unlock()
		})
	}
	var released []string
	err := s.Locked(ctx, "race", func(ctx context.Context, tx groupstore.Store) error {
		g, err := tx.Get(ctx, "race")
		if err != nil {
			return err
		}
		released = ids(g)
		return tx.Update(ctx, "race", groupstore.Update{IfVersion: g.Version, ReleaseAll: true, Complete: true})
	})
	wg.Wait()
	if err != nil {
		t.Fatalf("Locked: %v", err)
	}
	in := map[string]bool{}
	for _, id := range released {
		in[id] = true
	}
	for id, o := range results {
		switch {
		case o == groupstore.Added && !in[id]:
			t.Errorf("%s added but not in the group the Locked call released (%v)", id, released)
		case o == groupstore.Rejected && in[id]:
			t.Errorf("%s rejected but released", id)
		case o != groupstore.Added && o != groupstore.Rejected:
			t.Errorf("%s: outcome %v", id, o)
		}
	}
	if g := get(t, s, "race"); len(g.Messages) != 0 || !g.Complete {
		t.Errorf("after the release: complete %v, unreleased %v; want complete and none", g.Complete, ids(g))
	}
}

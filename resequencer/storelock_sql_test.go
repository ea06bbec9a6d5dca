package resequencer_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/lockreg/lockreg/groupstore"
	"github.com/lockreg/lockreg/groupstore/sqlstore"
	"github.com/lockreg/lockreg/internal/testdb"
	"github.com/lockreg/lockreg/internal/testpub"
	"github.com/lockreg/lockreg/resequencer"
)

// The resequencer on a SQL store without Config.Locks: the store's row
// locks protect the groups, and on PostgreSQL a message that cannot
// release anything is only added, in one statement that probes the group.
// These tests check that the discards still happen at once.

// storeLocked returns a resequencer on a SQL store of db in region,
// without Locks, publishing to rec; store, if not nil, wraps the store.
func storeLocked(t *testing.T, db testdb.Backend, region string, rec *testpub.Recorder, cfg resequencer.Config,
	wrap func(*sqlstore.Store) groupstore.Store) *resequencer.Resequencer {
	t.Helper()
	s, err := sqlstore.New(db.DB, sqlstore.Config{Region: region})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	cfg.Store, cfg.Publisher = s, rec
	if wrap != nil {
		cfg.Store = wrap(s)
	}
	q, _ := newReseq(t, cfg)
	return q
}

func TestADuplicateNumberIsDiscardedAtOnceUnderTheStoresLock(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, db testdb.Backend) {
		rec := testpub.NewRecorder()
		q := storeLocked(t, db, testdb.RandomRegion(), rec, resequencer.Config{}, nil)
		handle(t, q, part("g", 2, 3), partWithID("second-2", "g", 2, 3))
		if got := rec.On("discard"); len(got) != 1 || got[0].UUID != "second-2" || reasons(got)[0] != "duplicate" {
			t.Fatalf("discarded %v with reasons %v, want second-2 as duplicate", payloads(got), reasons(got))
		}
		handle(t, q, part("g", 3, 3), part("g", 1, 3))
		if got := payloads(rec.On("out")); !slices.Equal(got, []string{"g-1", "g-2", "g-3"}) {
			t.Errorf("released %v, want the first arrivals g-1, g-2, g-3", got)
		}
	})
}

func TestASizeDifferentFromTheGroupsIsDiscardedAtOnceUnderTheStoresLock(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, db testdb.Backend) {
		rec := testpub.NewRecorder()
		q := storeLocked(t, db, testdb.RandomRegion(), rec, resequencer.Config{}, nil)
		handle(t, q, part("g", 2, 3), partWithID("other-size", "g", 3, 5))
		got := rec.On("discard")
		if len(got) != 1 || got[0].UUID != "other-size" || !strings.HasPrefix(reasons(got)[0], "invalid: sequence_size 5 differs") {
			t.Fatalf("discarded %v with reasons %v", payloads(got), reasons(got))
		}
	})
}

func TestALateMessageIsDiscardedAtOnceUnderTheStoresLock(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, db testdb.Backend) {
		rec := testpub.NewRecorder()
		q := storeLocked(t, db, testdb.RandomRegion(), rec, resequencer.Config{ReleasePartialSequences: true}, nil)
		handle(t, q, part("g", 1, 4), part("g", 2, 4), partWithID("late-copy", "g", 2, 4))
		if got := rec.On("discard"); len(got) != 1 || got[0].UUID != "late-copy" || reasons(got)[0] != "late" {
			t.Fatalf("discarded %v with reasons %v, want late-copy as late", payloads(got), reasons(got))
		}
		handle(t, q, part("g", 4, 4), part("g", 3, 4))
		wantSeqs(t, rec.On("out"), 1, 2, 3, 4)
	})
}

func TestTheWholeSequenceIsReleasedInOrderUnderTheStoresLock(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, db testdb.Backend) {
		rec := testpub.NewRecorder()
		q := storeLocked(t, db, testdb.RandomRegion(), rec, resequencer.Config{}, nil)
		handle(t, q, part("g", 3, 4), part("g", 1, 4), part("g", 4, 4))
		if got := rec.On("out"); len(got) != 0 {
			t.Fatalf("released %v before the sequence was whole", seqs(got))
		}
		handle(t, q, part("g", 2, 4))
		wantSeqs(t, rec.On("out"), 1, 2, 3, 4)
	})
}

// beforeLocked is a store that runs before once, at its first Locked
// call, before it locks: another instance's handling between a message's
// Add and its handler's Locked step.
type beforeLocked struct {
	*sqlstore.Store
	once   sync.Once
	before func()
}

func (s *beforeLocked) Locked(ctx context.Context, key string, fn func(context.Context, groupstore.Store) error) error {
	s.once.Do(s.before)
	return s.Store.Locked(ctx, key, fn)
}

// A message added to a group that another instance then releases, with
// the message, and removes (ExpireGroupsOnCompletion) before the message's
// own Locked step: it is done, not redelivered into a new group.
func TestAMessageWhoseGroupAnotherInstanceReleasedAndRemovedAfterItsAddIsDone(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, db testdb.Backend) {
		region, rec := testdb.RandomRegion(), testpub.NewRecorder()
		cfg := resequencer.Config{ExpireGroupsOnCompletion: true}
		other := storeLocked(t, db, region, rec, cfg, nil)
		handle(t, other, part("g", 1, 2))
		hooked := storeLocked(t, db, region, rec, cfg, func(s *sqlstore.Store) groupstore.Store {
			return &beforeLocked{Store: s, before: func() {
				if err := other.Handle(part("g", 1, 2)); err != nil { // a redelivery: on PostgreSQL it releases 1 and 2
					t.Error(err)
				}
			}}
		})
		if err := hooked.Handle(part("g", 2, 2)); err != nil {
			t.Fatalf("Handle(g-2) = %v, want nil", err)
		}
		wantSeqs(t, rec.On("out"), 1, 2)
	})
}

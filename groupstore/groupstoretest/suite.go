// Package groupstoretest is the conformance suite of
// [github.com/lockreg/lockreg/groupstore.Store] implementations: every store
// of lockreg runs it, and so can third-party ones.
package groupstoretest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockreg/lockreg/groupstore"
)

// Run runs the suite as subtests of t. newStore returns an empty store, one
// no other test uses, for each subtest; it is called from the subtest's
// goroutine and may register clean-ups on it (and once from t's, to see
// whether the store is a [groupstore.Locker]: then Locked's tests run too,
// and the suite again with every call in a Locked call of its own).
func Run(t *testing.T, newStore func(t *testing.T) groupstore.Store) {
	for _, tc := range []struct {
		name string
		test func(t *testing.T, s groupstore.Store)
	}{
		{"AddCreatesTheGroupAndKeepsArrivalOrder", testArrivalOrder},
		{"MessagesKeepUUIDMetadataAndPayload", testRoundTrip},
		{"AddOfAKnownUUIDIsADuplicateAndChangesNothing", testDuplicate},
		{"ReleasedUUIDsStayKnown", testReleasedStayKnown},
		{"CompleteGroupRejectsNewMessages", testRejected},
		{"GetOfAMissingGroupIsNotFound", testGetMissing},
		{"UpdateReleasesListedMessagesAndCountsReleases", testPartialRelease},
		{"UpdateSetsLastReleasedSequence", testLastReleased},
		{"UpdateWithStaleVersionConflicts", testUpdateConflict},
		{"UpdateOfAMissingGroupIsNotFound", testUpdateMissing},
		{"RemoveForgetsTheGroupAndItsUUIDs", testRemove},
		{"RemoveWithStaleVersionConflicts", testRemoveConflict},
		{"GroupsOfDifferentKeysAreIndependent", testIndependentKeys},
		{"DueGroupIsClaimedOnceUntilItsLeaseEnds", testClaimOnce},
		{"ClaimCarriesTheVersionAndTheGroupKey", testClaimVersion},
		{"ClearedOrMovedTimeoutIsNotClaimed", testClaimCleared},
		{"AddWithTimeoutEndsAClaim", testAddEndsClaim},
		{"ClaimDueHonoursTheLimit", testClaimLimit},
		{"ConcurrentAddsToOneGroupAreAllKept", testConcurrentAdds},
		{"DoneContextFails", testDoneContext},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.test(t, newStore(t)) })
	}
	if _, ok := newStore(t).(groupstore.Locker); ok {
		runLocker(t, newStore)
	}
}

var ctx = context.Background()

func msg(id string) groupstore.Message {
	return groupstore.Message{UUID: id, Metadata: map[string]string{"id": id}, Payload: []byte("payload of " + id)}
}

func add(t *testing.T, s groupstore.Store, key string, m groupstore.Message, timeout time.Duration) (groupstore.Group, groupstore.Outcome) {
	t.Helper()
	g, o, err := s.Add(ctx, key, m, timeout)
	if err != nil {
		t.Fatalf("Add(%q, %q): %v", key, m.UUID, err)
	}
	return g, o
}

func mustAdd(t *testing.T, s groupstore.Store, key string, ids ...string) groupstore.Group {
	t.Helper()
	var g groupstore.Group
	for _, id := range ids {
		var o groupstore.Outcome
		g, o = add(t, s, key, msg(id), 0)
		if o != groupstore.Added {
			t.Fatalf("Add(%q, %q) = %v, want added", key, id, o)
		}
	}
	return g
}

func get(t *testing.T, s groupstore.Store, key string) groupstore.Group {
	t.Helper()
	g, err := s.Get(ctx, key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	return g
}

func update(t *testing.T, s groupstore.Store, key string, u groupstore.Update) {
	t.Helper()
	if err := s.Update(ctx, key, u); err != nil {
		t.Fatalf("Update(%q, %+v): %v", key, u, err)
	}
}

func ids(g groupstore.Group) []string {
	var out []string
	for _, m := range g.Messages {
		out = append(out, m.UUID)
	}
	return out
}

func testArrivalOrder(t *testing.T, s groupstore.Store) {
	order := []string{"m3", "m1", "m10", "m2", "a"}
	g := mustAdd(t, s, "order-1", order...)
	if g.Key != "order-1" || g.Size != len(order) || g.ID == "" || g.Complete || g.Version == 0 {
		t.Fatalf("Add returned %+v", g)
	}
	got := get(t, s, "order-1")
	if !slices.Equal(ids(got), order) {
		t.Errorf("messages %v, want arrival order %v", ids(got), order)
	}
	if got.ID != g.ID || got.Size != len(order) || got.Version != g.Version {
		t.Errorf("Get = %+v, Add said %+v", got, g)
	}
	if got.Created.IsZero() || got.Updated.Before(got.Created) {
		t.Errorf("Created %v, Updated %v", got.Created, got.Updated)
	}
	if !got.Due.IsZero() {
		t.Errorf("Due = %v without a timeout", got.Due)
	}
}

func testRoundTrip(t *testing.T, s groupstore.Store) {
	in := []groupstore.Message{
		{UUID: "with-all", Metadata: map[string]string{"a": "1", "unicode": "ünï €", "empty": ""}, Payload: []byte{0, 1, 2, 255, '\n'}},
		{UUID: "no-metadata", Payload: []byte(`{"json":true}`)},
		{UUID: "no-payload", Metadata: map[string]string{"k": "v"}},
		{UUID: "a-long-message-id:" + strings.Repeat("7", 200)},
	}
	for _, m := range in {
		if _, o := add(t, s, "rt", m, 0); o != groupstore.Added {
			t.Fatalf("Add(%q) = %v", m.UUID, o)
		}
	}
	in[0].Metadata["a"] = "changed after Add" // the store must have copied
	in[0].Metadata["a"] = "1"
	got := get(t, s, "rt")
	if len(got.Messages) != len(in) {
		t.Fatalf("got %d messages, want %d", len(got.Messages), len(in))
	}
	for i, m := range got.Messages {
		w := in[i]
		if m.UUID != w.UUID || string(m.Payload) != string(w.Payload) || len(m.Metadata) != len(w.Metadata) {
			t.Errorf("message %d = %+v, want %+v", i, m, w)
			continue
		}
		for k, v := range w.Metadata {
			if m.Metadata[k] != v {
				t.Errorf("message %d metadata %q = %q, want %q", i, k, m.Metadata[k], v)
			}
		}
	}
	got.Messages[0].Payload[0] = 42 // the caller's own copy
	if again := get(t, s, "rt"); again.Messages[0].Payload[0] != 0 {
		t.Error("changing a returned payload changed the store")
	}
}

func testDuplicate(t *testing.T, s groupstore.Store) {
	g1 := mustAdd(t, s, "dup", "m1", "m2")
	g2, o := add(t, s, "dup", groupstore.Message{UUID: "m1", Payload: []byte("other")}, time.Hour)
	if o != groupstore.Duplicate {
		t.Fatalf("re-adding m1 = %v, want duplicate", o)
	}
	if g2.Size != 2 || g2.Version != g1.Version {
		t.Errorf("after duplicate: size %d version %d, want 2 and %d", g2.Size, g2.Version, g1.Version)
	}
	got := get(t, s, "dup")
	if !slices.Equal(ids(got), []string{"m1", "m2"}) || string(got.Messages[0].Payload) != "payload of m1" {
		t.Errorf("messages %v (%q)", ids(got), got.Messages[0].Payload)
	}
	if !got.Due.IsZero() {
		t.Error("a duplicate set the timeout")
	}
}

func testReleasedStayKnown(t *testing.T, s groupstore.Store) {
	g := mustAdd(t, s, "rel", "m1", "m2")
	update(t, s, "rel", groupstore.Update{ReleaseAll: true})
	if _, o := add(t, s, "rel", msg("m1"), 0); o != groupstore.Duplicate {
		t.Errorf("re-adding released m1 = %v, want duplicate", o)
	}
	after, o := add(t, s, "rel", msg("m3"), 0)
	if o != groupstore.Added || after.Size != 1 || after.ID != g.ID || after.Releases != 1 {
		t.Errorf("adding m3 after release = %v %+v", o, after)
	}
}

func testRejected(t *testing.T, s groupstore.Store) {
	mustAdd(t, s, "done", "m1")
	update(t, s, "done", groupstore.Update{ReleaseAll: true, Complete: true})
	before := get(t, s, "done")
	g, o := add(t, s, "done", msg("late"), time.Hour)
	if o != groupstore.Rejected {
		t.Fatalf("late message = %v, want rejected", o)
	}
	if !g.Complete || g.Version != before.Version || g.Size != 0 {
		t.Errorf("after rejection %+v", g)
	}
	if _, o := add(t, s, "done", msg("m1"), 0); o != groupstore.Duplicate {
		t.Errorf("redelivered released m1 to a complete group = %v, want duplicate", o)
	}
	if after := get(t, s, "done"); !after.Due.IsZero() || after.Version != before.Version {
		t.Errorf("rejection changed the group: %+v", after)
	}
}

func testGetMissing(t *testing.T, s groupstore.Store) {
	if _, err := s.Get(ctx, "missing"); !errors.Is(err, groupstore.ErrNotFound) {
		t.Errorf("Get(missing) error = %v, want ErrNotFound", err)
	}
}

func testPartialRelease(t *testing.T, s groupstore.Store) {
	mustAdd(t, s, "part", "m1", "m2", "m3", "m4")
	update(t, s, "part", groupstore.Update{Release: []string{"m3", "m1", "unknown"}})
	g := get(t, s, "part")
	if !slices.Equal(ids(g), []string{"m2", "m4"}) || g.Size != 2 || g.Releases != 1 || g.Complete {
		t.Fatalf("after releasing m1, m3: %v %+v", ids(g), g)
	}
	update(t, s, "part", groupstore.Update{ReleaseAll: true})
	g = get(t, s, "part")
	if len(g.Messages) != 0 || g.Size != 0 || g.Releases != 2 {
		t.Errorf("after releasing all: %v size %d releases %d", ids(g), g.Size, g.Releases)
	}
	update(t, s, "part", groupstore.Update{Complete: true})
	if g = get(t, s, "part"); !g.Complete || g.Releases != 2 {
		t.Errorf("after completing: %+v", g)
	}
}

func testLastReleased(t *testing.T, s groupstore.Store) {
	mustAdd(t, s, "seq", "m1")
	update(t, s, "seq", groupstore.Update{SetLastReleasedSequence: true, LastReleasedSequence: 7})
	if g := get(t, s, "seq"); g.LastReleasedSequence != 7 {
		t.Errorf("LastReleasedSequence = %d, want 7", g.LastReleasedSequence)
	}
	update(t, s, "seq", groupstore.Update{})
	if g := get(t, s, "seq"); g.LastReleasedSequence != 7 {
		t.Errorf("an update without SetLastReleasedSequence changed it to %d", g.LastReleasedSequence)
	}
}

func testUpdateConflict(t *testing.T, s groupstore.Store) {
	g := mustAdd(t, s, "ver", "m1")
	mustAdd(t, s, "ver", "m2")
	err := s.Update(ctx, "ver", groupstore.Update{IfVersion: g.Version, ReleaseAll: true, Complete: true})
	if !errors.Is(err, groupstore.ErrConflict) {
		t.Fatalf("update at stale version: %v, want ErrConflict", err)
	}
	now := get(t, s, "ver")
	if now.Size != 2 || now.Complete {
		t.Errorf("a conflicting update changed the group: %+v", now)
	}
	update(t, s, "ver", groupstore.Update{IfVersion: now.Version, Complete: true})
	if after := get(t, s, "ver"); after.Version != now.Version+1 {
		t.Errorf("version %d after update, was %d; want one more", after.Version, now.Version)
	}
}

func testUpdateMissing(t *testing.T, s groupstore.Store) {
	if err := s.Update(ctx, "missing", groupstore.Update{Complete: true}); !errors.Is(err, groupstore.ErrNotFound) {
		t.Errorf("Update(missing) = %v, want ErrNotFound", err)
	}
}

func testRemove(t *testing.T, s groupstore.Store) {
	g := mustAdd(t, s, "gone", "m1", "m2")
	update(t, s, "gone", groupstore.Update{Release: []string{"m1"}})
	if err := s.Remove(ctx, "gone", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "gone"); !errors.Is(err, groupstore.ErrNotFound) {
		t.Fatalf("Get after Remove: %v", err)
	}
	again, o := add(t, s, "gone", msg("m1"), 0)
	if o != groupstore.Added || again.ID == g.ID || again.Size != 1 || again.Releases != 0 {
		t.Errorf("re-adding after Remove: %v %+v (old ID %s)", o, again, g.ID)
	}
	if err := s.Remove(ctx, "never", 0); !errors.Is(err, groupstore.ErrNotFound) {
		t.Errorf("Remove(missing) = %v, want ErrNotFound", err)
	}
}

func testRemoveConflict(t *testing.T, s groupstore.Store) {
	g := mustAdd(t, s, "rc", "m1")
	mustAdd(t, s, "rc", "m2")
	if err := s.Remove(ctx, "rc", g.Version); !errors.Is(err, groupstore.ErrConflict) {
		t.Fatalf("Remove at stale version = %v, want ErrConflict", err)
	}
	now := get(t, s, "rc")
	if err := s.Remove(ctx, "rc", now.Version); err != nil {
		t.Fatalf("Remove at current version: %v", err)
	}
}

func testIndependentKeys(t *testing.T, s groupstore.Store) {
	keys := []string{"a", "A", "a ", "ключ", "x/y:z", "", string(slices.Repeat([]byte("k"), 300))}
	for i, k := range keys {
		mustAdd(t, s, k, fmt.Sprintf("m%d", i), "shared-id")
	}
	update(t, s, "a", groupstore.Update{ReleaseAll: true, Complete: true})
	for i, k := range keys {
		g := get(t, s, k)
		if g.Key != k {
			t.Errorf("Get(%q).Key = %q", k, g.Key)
		}
		want := []string{fmt.Sprintf("m%d", i), "shared-id"}
		if k == "a" {
			want = nil
		}
		if !slices.Equal(ids(g), want) {
			t.Errorf("group %q holds %v, want %v", k, ids(g), want)
		}
	}
}

func testConcurrentAdds(t *testing.T, s groupstore.Store) {
	const n = 8
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			_, o, err := s.Add(ctx, "conc", msg(fmt.Sprintf("m%d", i)), 0)
			if err == nil && o != groupstore.Added {
				err = fmt.Errorf("m%d: %v", i, o)
			}
			if err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if g := get(t, s, "conc"); g.Size != n || len(g.Messages) != n {
		t.Errorf("size %d with %d messages, want %d", g.Size, len(g.Messages), n)
	}
}

func testDoneContext(t *testing.T, s groupstore.Store) {
	c, cancel := context.WithCancel(ctx)
	cancel()
	if _, _, err := s.Add(c, "ctx", msg("m1"), 0); !errors.Is(err, context.Canceled) {
		t.Errorf("Add with a canceled context: %v", err)
	}
	if _, err := s.ClaimDue(c, 1, time.Second); !errors.Is(err, context.Canceled) {
		t.Errorf("ClaimDue with a canceled context: %v", err)
	}
}

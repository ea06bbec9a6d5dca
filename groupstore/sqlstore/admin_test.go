package sqlstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockreg/lockreg/groupstore"
	"github.com/lockreg/lockreg/groupstore/sqlstore"
	"github.com/lockreg/lockreg/internal/testdb"
)

func keys(gs []sqlstore.GroupInfo) []string {
	var out []string
	for _, g := range gs {
		out = append(out, g.Key)
	}
	return out
}

func TestGroupsListsByState(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, db testdb.Backend) {
		ctx := context.Background()
		s := newStore(t, db.DB, sqlstore.Config{DisableCleanup: true})
		for _, k := range []string{"a", "b", "c"} {
			if _, _, err := s.Add(ctx, k, groupstore.Message{UUID: "m-" + k, Payload: []byte("xy")}, 0); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Update(ctx, "b", groupstore.Update{ReleaseAll: true, Complete: true}); err != nil {
			t.Fatal(err)
		}
		if err := s.Expire(ctx, "c"); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			f    sqlstore.GroupFilter
			want []string
		}{
			{sqlstore.GroupFilter{}, []string{"a", "b", "c"}},
			{sqlstore.GroupFilter{State: sqlstore.OpenGroups}, []string{"a", "c"}},
			{sqlstore.GroupFilter{State: sqlstore.CompleteGroups}, []string{"b"}},
			{sqlstore.GroupFilter{State: sqlstore.DueGroups}, []string{"c"}},
			{sqlstore.GroupFilter{OlderThan: time.Hour}, nil},
			{sqlstore.GroupFilter{Limit: 2}, []string{"a", "b"}},
		} {
			got, err := s.Groups(ctx, c.f)
			if err != nil {
				t.Fatal(err)
			}
			if g := keys(got); len(g) != len(c.want) || !equalStrings(g, c.want) {
				t.Errorf("Groups(%+v) = %v, want %v", c.f, g, c.want)
			}
		}
	})
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestInspectShowsTheGroupAndItsMessagesReleasedOnesIncluded(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, db testdb.Backend) {
		ctx := context.Background()
		s := newStore(t, db.DB, sqlstore.Config{DisableCleanup: true})
		for _, m := range []string{"m1", "m2"} {
			if _, _, err := s.Add(ctx, "k", groupstore.Message{UUID: m, Payload: []byte("hello")}, time.Hour); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Update(ctx, "k", groupstore.Update{Release: []string{"m1"}}); err != nil {
			t.Fatal(err)
		}
		g, msgs, err := s.Inspect(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		if g.Key != "k" || g.Size != 1 || g.Complete || g.Due.IsZero() || g.Releases != 1 {
			t.Errorf("group %+v", g)
		}
		if len(msgs) != 2 || msgs[0].UUID != "m1" || !msgs[0].Released || msgs[1].UUID != "m2" || msgs[1].Released ||
			msgs[1].PayloadSize != 5 {
			t.Errorf("messages %+v", msgs)
		}
		if _, _, err := s.Inspect(ctx, "none"); !errors.Is(err, groupstore.ErrNotFound) {
			t.Errorf("Inspect of a missing group: %v, want ErrNotFound", err)
		}
	})
}

// An expired group is due at once: the next ClaimDue, a timeout runner's,
// returns it.
func TestExpireMakesTheGroupDueForTheTimeoutRunner(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, db testdb.Backend) {
		ctx := context.Background()
		s := newStore(t, db.DB, sqlstore.Config{DisableCleanup: true})
		if _, _, err := s.Add(ctx, "k", groupstore.Message{UUID: "m1"}, time.Hour); err != nil {
			t.Fatal(err)
		}
		if due, err := s.ClaimDue(ctx, 10, time.Minute); err != nil || len(due) != 0 {
			t.Fatalf("ClaimDue before Expire: %v, %v", due, err)
		}
		if err := s.Expire(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		due, err := s.ClaimDue(ctx, 10, time.Minute)
		if err != nil || len(due) != 1 || due[0].Key != "k" {
			t.Fatalf("ClaimDue after Expire: %v, %v", due, err)
		}
		if err := s.Expire(ctx, "none"); !errors.Is(err, groupstore.ErrNotFound) {
			t.Errorf("Expire of a missing group: %v, want ErrNotFound", err)
		}
	})
}

package groupstoretest

// The suite's tests of ClaimDue: a due group is claimed once per lease, at
// its version, not again once its due time is cleared or an Add moves it,
// and at most limit at a time.

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/lockreg/lockreg/groupstore"
)

// claimUntil polls ClaimDue until it returns a claim of key, or fails t.
func claimUntil(t *testing.T, s groupstore.Store, key string) groupstore.DueGroup {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		claims, err := s.ClaimDue(ctx, 100, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range claims {
			if c.Key == key {
				return c
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("group %q never became due", key)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func claimed(t *testing.T, s groupstore.Store, key string) bool {
	t.Helper()
	claims, err := s.ClaimDue(ctx, 1000, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return slices.ContainsFunc(claims, func(c groupstore.DueGroup) bool { return c.Key == key })
}

func testClaimOnce(t *testing.T, s groupstore.Store) {
	add(t, s, "due", msg("m1"), time.Millisecond)
	add(t, s, "not-due", msg("m1"), time.Hour)
	claimUntil(t, s, "due")
	if claimed(t, s, "due") {
		t.Error("a claimed group was claimed again within its lease")
	}
	if claimed(t, s, "not-due") {
		t.Error("a group due in an hour was claimed")
	}
	if g := get(t, s, "due"); g.Due.IsZero() {
		t.Error("Get shows no due time")
	}
}

func testClaimVersion(t *testing.T, s groupstore.Store) {
	g, _ := add(t, s, "cv", msg("m1"), time.Millisecond)
	c := claimUntil(t, s, "cv")
	if c.Version != g.Version {
		t.Errorf("claim version %d, group version %d", c.Version, g.Version)
	}
}

func testClaimCleared(t *testing.T, s groupstore.Store) {
	add(t, s, "cleared", msg("m1"), time.Millisecond)
	update(t, s, "cleared", groupstore.Update{ClearTimeout: true})
	add(t, s, "moved", msg("m1"), time.Millisecond)
	update(t, s, "moved", groupstore.Update{Timeout: time.Hour})
	add(t, s, "marker", msg("m1"), time.Millisecond)
	claimUntil(t, s, "marker") // by now the other two would be due
	if claimed(t, s, "cleared") || claimed(t, s, "moved") {
		t.Error("a group whose timeout was cleared or moved was claimed")
	}
	if g := get(t, s, "cleared"); !g.Due.IsZero() {
		t.Errorf("cleared timeout shows Due %v", g.Due)
	}
}

func testAddEndsClaim(t *testing.T, s groupstore.Store) {
	add(t, s, "reclaim", msg("m1"), time.Millisecond)
	first := claimUntil(t, s, "reclaim")
	g, _ := add(t, s, "reclaim", msg("m2"), time.Millisecond)
	second := claimUntil(t, s, "reclaim")
	if second.Version != g.Version || second.Version == first.Version {
		t.Errorf("claims at versions %d then %d, group at %d", first.Version, second.Version, g.Version)
	}
}

func testClaimLimit(t *testing.T, s groupstore.Store) {
	for i := range 5 {
		add(t, s, fmt.Sprintf("lim-%d", i), msg("m"), time.Millisecond)
	}
	deadline := time.Now().Add(10 * time.Second)
	total := 0
	for total < 5 {
		claims, err := s.ClaimDue(ctx, 2, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if len(claims) > 2 {
			t.Fatalf("ClaimDue(limit 2) returned %d claims", len(claims))
		}
		total += len(claims)
		if time.Now().After(deadline) {
			t.Fatalf("claimed %d of 5 due groups", total)
		}
		if len(claims) == 0 {
			time.Sleep(5 * time.Millisecond)
		}
	}
	if claims, _ := s.ClaimDue(ctx, 10, time.Hour); len(claims) != 0 {
		t.Errorf("claimed %d more after all 5", len(claims))
	}
}

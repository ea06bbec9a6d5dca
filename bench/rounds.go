package main

import (
	"context"
	"slices"
)

// lockRound runs lock scenario s (contended also gives safety) once for
// every contestant of cfg, in their order rotated by round (see rotate),
// and passes each result to keep.
func lockRound(ctx context.Context, e *env, cfg config, s string, round int, want func(string) bool, keep func(result)) {
	var cs []contestant
	for _, c := range contestants {
		if !slices.Contains(cfg.only, c.name) {
			continue
		}
		if (s == "contended" && !c.isLock) || (s == "cache" && !c.lockreg) || (c.only != "" && c.only != s) {
			continue
		}
		cs = append(cs, c)
	}
	for _, c := range rotate(cs, round) {
		if err := e.unavailable(c); err != nil {
			for _, sc := range []string{s, "safety"} {
				if want(sc) && (sc == s || s == "contended") {
					keep(result{Scenario: sc, Contestant: c.name, Skipped: err.Error()})
				}
			}
			continue
		}
		var (
			r   result
			err error
		)
		switch s {
		case "uncontended":
			r, err = uncontended(ctx, e, c, cfg)
		case "parallel":
			r, err = parallel(ctx, e, c, cfg)
		case "cache":
			r, err = cache(ctx, e, c, cfg)
		case "contended":
			var sr result
			r, sr, err = contended(ctx, e, c, cfg)
			if err != nil {
				r.Skipped, sr.Skipped = "failed: "+err.Error(), "failed: "+err.Error()
			}
			if want("contended") {
				keep(r)
			}
			if want("safety") {
				keep(sr)
			}
			continue
		}
		if err != nil {
			r.Skipped = "failed: " + err.Error()
		}
		keep(r)
	}
}

// rotate returns s started at its element round mod len(s), the rest in
// order after it and then the ones before: in n rounds each contestant
// runs once in each place of the order, so that what a place brings (the
// first after another scenario's writes, the autovacuum of the run before,
// a checkpoint's full-page writes) falls on every contestant alike rather
// than always on the same one.
func rotate[T any](s []T, round int) []T {
	if len(s) == 0 {
		return s
	}
	k := round % len(s)
	return append(slices.Clone(s[k:]), s[:k]...)
}

// pickRound is the result that stands for a contestant's (or variant's)
// rounds of one scenario: a failed or skipped round if there is one, else
// the round with the most violations if any has some (neither is ever
// hidden), for safety that worst round, else the median round by ops/s
// (the lower of the middle two for an even count); for scheduler-latency
// the median round by start p50 (the higher of the middle two).
func pickRound(rs []result) result {
	for _, r := range rs {
		if r.Skipped != "" {
			return r
		}
	}
	if len(rs) == 1 {
		return rs[0]
	}
	rs = slices.Clone(rs)
	worst := rs[0]
	for _, r := range rs[1:] {
		if deref(r.Violations) > deref(worst.Violations) {
			worst = r
		}
	}
	if deref(worst.Violations) > 0 || worst.Scenario == "safety" {
		return worst
	}
	slices.SortStableFunc(rs, func(a, b result) int {
		x, y := rank(a), rank(b)
		switch {
		case x < y:
			return -1
		case x > y:
			return 1
		}
		return 0
	})
	return rs[(len(rs)-1)/2]
}

func deref(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

func derefF(p *float64) float64 {
	if p == nil {
		return 0
	}
	return *p
}

// rank orders the rounds of a result for pickRound: by ops/s, or by
// minus the start p50 where the result has one (scheduler-latency).
func rank(r result) float64 {
	if r.StartP50ms != nil {
		return -*r.StartP50ms
	}
	return derefF(r.OpsPerSec)
}

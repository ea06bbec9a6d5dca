package main

import "slices"

// serverOf returns the server of a contestant, group variant or floor, or
// "" for a name the benchmark does not know.
func serverOf(name string) string {
	for _, c := range contestants {
		if c.name == name {
			return c.server
		}
	}
	for _, v := range groupVariants {
		if v.name == name {
			return v.server
		}
	}
	for _, f := range groupFloors {
		if f.name == name {
			return f.server
		}
	}
	return ""
}

// isFloor reports whether name is a floor.
func isFloor(name string) bool {
	for _, s := range []string{"postgres", "mariadb", "sqlite"} {
		for _, k := range []string{"floor-durable", "floor-handoff", "floor-insert", "floor-add"} {
			if name == floorName(s, k) {
				return true
			}
		}
	}
	return false
}

// floorsOf returns the floor a result of scenario by name is a ratio to,
// and for the group scenarios also the insert floor; "" where it has none.
func floorsOf(scenario, name string) (floor, insert string) {
	server := serverOf(name)
	if isFloor(name) || (server != "postgres" && server != "mariadb" && server != "sqlite") {
		return "", ""
	}
	switch scenario {
	case "uncontended", "parallel":
		return floorName(server, "floor-durable"), ""
	case "contended":
		if server == "postgres" { // the floor's hand-off is a NOTIFY
			return "floor-handoff", ""
		}
	case "aggregator", "resequencer":
		return floorName(server, "floor-add"), floorName(server, "floor-insert")
	}
	return "", ""
}

// applyFloors sets on each picked result (pickRound's of its rounds) the
// median over the rounds of its ratio to its floor in the same round:
// rounds returns a scenario's and contestant's results in round order.
// Interleaved, a round's contestant and floor ran minutes apart at most.
func applyFloors(picked []result, rounds func(scenario, name string) []result) {
	for i := range picked {
		r := &picked[i]
		if r.Skipped != "" || r.OpsPerSec == nil {
			continue
		}
		floor, insert := floorsOf(r.Scenario, r.Contestant)
		own := rounds(r.Scenario, r.Contestant)
		if q := medianRatio(own, rounds(r.Scenario, floor)); q != nil {
			r.Floor, r.FloorRatio = floor, q
		}
		r.FloorInsertRatio = medianRatio(own, rounds(r.Scenario, insert))
	}
}

// medianRatio is the median over the rounds both ran of a's ops/s ÷ b's,
// or nil when no round has both (the lower middle of an even count).
func medianRatio(a, b []result) *float64 {
	var qs []float64
	for i := range min(len(a), len(b)) {
		x, y := a[i], b[i]
		if x.Skipped == "" && y.Skipped == "" && x.OpsPerSec != nil && y.OpsPerSec != nil && *y.OpsPerSec > 0 {
			qs = append(qs, *x.OpsPerSec / *y.OpsPerSec)
		}
	}
	if len(qs) == 0 {
		return nil
	}
	slices.Sort(qs)
	return fp(qs[(len(qs)-1)/2])
}

// groupFloorsFor returns the group floors that run with the variants of
// cfg: those named in -variants and those on a selected variant's server.
func groupFloorsFor(cfg config) []groupFloor {
	var out []groupFloor
	for _, f := range groupFloors {
		on := slices.Contains(cfg.variants, f.name)
		for _, v := range groupVariants {
			on = on || (v.server == f.server && slices.Contains(cfg.variants, v.name))
		}
		if on {
			out = append(out, f)
		}
	}
	return out
}

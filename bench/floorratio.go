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

// applyFloors sets each result's ratios to the floors of its scenario in
// rs, where the floor ran in the same run.
func applyFloors(rs []result) {
	ops := map[[2]string]float64{}
	for _, r := range rs {
		if r.Skipped == "" && r.OpsPerSec != nil && *r.OpsPerSec > 0 {
			ops[[2]string{r.Scenario, r.Contestant}] = *r.OpsPerSec
		}
	}
	for i := range rs {
		r := &rs[i]
		floor, insert := floorsOf(r.Scenario, r.Contestant)
		if r.Skipped != "" || r.OpsPerSec == nil {
			continue
		}
		if d, ok := ops[[2]string{r.Scenario, floor}]; ok {
			r.Floor, r.FloorRatio = floor, fp(*r.OpsPerSec/d)
		}
		if d, ok := ops[[2]string{r.Scenario, insert}]; ok {
			r.FloorInsertRatio = fp(*r.OpsPerSec / d)
		}
	}
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

package main

import (
	"os"
	"testing"
)

// TestFloorsRunBesideTheContestantsAndGiveTheirRatios runs every floor
// briefly with one lockreg contestant and checks that each floor ran
// without errors, that floor-handoff passes the key round its instances
// in turn, and that the contestant's records carry the ratio to the floor
// of their scenario. It asserts no timing.
func TestFloorsRunBesideTheContestantsAndGiveTheirRatios(t *testing.T) {
	skipWithoutPostgres(t)
	recs := runJSON(t, "-scenarios", "uncontended,contended,aggregator",
		"-only", "lockreg-pgx-listen,floor-durable,mariadb-floor-durable,sqlite-floor-durable,floor-handoff",
		"-variants", "floor-insert,floor-add,mariadb-floor-insert,mariadb-floor-add,sqlite-floor-insert,sqlite-floor-add",
		"-duration", "300ms", "-warmup", "100ms")
	noMariaDB := mariadbReachable() != "" && os.Getenv("CI") != "true"
	floors := map[string][]string{
		"uncontended": {"floor-durable", "mariadb-floor-durable", "sqlite-floor-durable"},
		"contended":   {"floor-handoff"},
		"aggregator":  {"floor-insert", "floor-add", "mariadb-floor-insert", "mariadb-floor-add", "sqlite-floor-insert", "sqlite-floor-add"},
	}
	for scenario, names := range floors {
		for _, name := range names {
			r := findRecord(recs, scenario, name)
			switch {
			case r == nil:
				t.Errorf("%s/%s: no record", scenario, name)
			case r["skipped"] != nil && serverOf(name) == "mariadb" && noMariaDB:
				t.Logf("%s/%s skipped: %v", scenario, name, r["skipped"])
			case r["skipped"] != nil:
				t.Errorf("%s/%s skipped: %v", scenario, name, r["skipped"])
			case r["ops_per_sec"] == nil || r["ops_per_sec"].(float64) <= 0:
				t.Errorf("%s/%s: ops_per_sec %v", scenario, name, r["ops_per_sec"])
			case r["errors"] != nil && r["errors"].(float64) != 0:
				t.Errorf("%s/%s: %v errors", scenario, name, r["errors"])
			}
		}
	}
	if r := findRecord(recs, "contended", "floor-handoff"); r != nil && r["skipped"] == nil {
		per, _ := r["acquisitions_per_instance"].([]any)
		lo, hi := per[0].(float64), per[0].(float64)
		for _, v := range per {
			lo, hi = min(lo, v.(float64)), max(hi, v.(float64))
		}
		if hi-lo > 1 {
			t.Errorf("floor-handoff acquisitions per instance %v: the ring gives each instance its turn", per)
		}
	}
	for scenario, floor := range map[string]string{"uncontended": "floor-durable", "contended": "floor-handoff"} {
		r := findRecord(recs, scenario, "lockreg-pgx-listen")
		if r == nil || r["floor"] != floor || r["floor_ratio"] == nil || r["floor_ratio"].(float64) <= 0 {
			t.Errorf("%s/lockreg-pgx-listen: floor %v, floor_ratio %v; want the ratio to %s", scenario, r["floor"], r["floor_ratio"], floor)
		}
	}
}

func TestTheFloorRatioIsTheMedianOfEachRoundsRatioToTheFloorOfTheSameScenarioAndServer(t *testing.T) {
	rounds := map[string][]result{}
	add := func(scenario, name string, ops ...float64) {
		for _, v := range ops {
			rounds[scenario+"/"+name] = append(rounds[scenario+"/"+name], result{Scenario: scenario, Contestant: name, OpsPerSec: fp(v)})
		}
	}
	add("aggregator", "postgres-4", 3000, 1000, 5000)
	add("aggregator", "floor-add", 4000, 500, 10000) // rounds: 0.75, 2, 0.5
	add("aggregator", "floor-insert", 6000, 1000, 5000)
	add("aggregator", "mariadb-4", 1000)
	add("aggregator", "mariadb-floor-add", 2000)
	add("resequencer", "postgres-4", 3000)
	add("uncontended", "lockreg-sqlite", 900)
	add("uncontended", "floor-durable", 100)
	picked := []result{rounds["aggregator/postgres-4"][0], rounds["aggregator/mariadb-4"][0],
		rounds["resequencer/postgres-4"][0], rounds["uncontended/lockreg-sqlite"][0]}
	applyFloors(picked, func(s, c string) []result { return rounds[s+"/"+c] })
	want := []struct {
		floor         string
		ratio, insert float64
	}{{"floor-add", 0.75, 1}, {"mariadb-floor-add", 0.5, 0}, {}, {}} // insert: 0.5, 1, 1
	for i, w := range want {
		r := picked[i]
		if r.Floor != w.floor || derefF(r.FloorRatio) != w.ratio || derefF(r.FloorInsertRatio) != w.insert {
			t.Errorf("%s/%s: floor %q ratio %v insert ratio %v; want %q %v %v", r.Scenario, r.Contestant,
				r.Floor, derefF(r.FloorRatio), derefF(r.FloorInsertRatio), w.floor, w.ratio, w.insert)
		}
	}
}

package sqlstore_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/lockreg/lockreg/groupstore"
	"github.com/lockreg/lockreg/groupstore/sqlstore"
	"github.com/lockreg/lockreg/internal/dialect"
	"github.com/lockreg/lockreg/internal/testdb"
	"github.com/lockreg/lockreg/jdbc"
)

// forEachSummary runs test on PostgreSQL, whose AddProbe keeps a probe
// summary in the group's row (script 000008), with a store in region on
// the default tables.
func forEachSummary(t *testing.T, test func(t *testing.T, s *sqlstore.Store, db testdb.Backend, region string)) {
	testdb.ForEachWhere(t, func(b testdb.Backend) bool { return b.Dialect == jdbc.Postgres }, func(t *testing.T, db testdb.Backend) {
		region := testdb.RandomRegion()
		test(t, newStore(t, db.DB, sqlstore.Config{Region: region}), db, region)
	})
}

// summaryKept reports whether the group of key has a probe summary true
// for its current version.
func summaryKept(t *testing.T, db testdb.Backend, region, key string) bool {
	t.Helper()
	var kept bool
	err := db.DB.QueryRowContext(context.Background(), `SELECT COALESCE(PROBE_VERSION = VERSION, FALSE) FROM INT_GROUP `+
		`WHERE CORRELATION_KEY = $1 AND REGION = $2`, key, region).Scan(&kept)
	if err != nil {
		t.Fatal(err)
	}
	return kept
}

func TestAddProbeKeepsTheGroupsSummary(t *testing.T) {
	forEachSummary(t, func(t *testing.T, s *sqlstore.Store, db testdb.Backend, region string) {
		addProbe(t, s, "k", seqMessage("m1", "1", "3"), probeFor(1, 3), groupstore.Added)
		addProbe(t, s, "k", seqMessage("m2", "2", "3"), probeFor(2, 3), groupstore.Added)
		if !summaryKept(t, db, region, "k") {
			t.Error("after two probing Adds the group has no summary of its messages")
		}
	})
}

// A plain Add leaves the summary behind; the next probe reads the
// messages, finds the twin, and builds the summary again.
func TestAddProbeFindsATwinThatAPlainAddWrote(t *testing.T) {
	forEachSummary(t, func(t *testing.T, s *sqlstore.Store, db testdb.Backend, region string) {
		ctx := context.Background()
		addProbe(t, s, "k", seqMessage("m1", "1", "3"), probeFor(1, 3), groupstore.Added)
		if _, _, err := s.Add(ctx, "k", seqMessage("m2", "2", "3"), 0); err != nil {
			t.Fatal(err)
		}
		if addProbe(t, s, "k", seqMessage("m3", "2", "3"), probeFor(2, 3), groupstore.Added) {
			t.Error("a second message numbered 2 fits")
		}
		if !summaryKept(t, db, region, "k") {
			t.Error("the probe that read the messages did not build the summary again")
		}
		if addProbe(t, s, "k", seqMessage("m4", "1", "3"), probeFor(1, 3), groupstore.Added) {
			t.Error("a second message numbered 1 fits the summary built again")
		}
	})
}

func TestAddProbeFindsAMisfitOfTheRebuiltSummary(t *testing.T) {
	forEachSummary(t, func(t *testing.T, s *sqlstore.Store, _ testdb.Backend, _ string) {
		ctx := context.Background()
		if _, _, err := s.Add(ctx, "k", seqMessage("m1", "x", "3"), 0); err != nil {
			t.Fatal(err)
		}
		if addProbe(t, s, "k", seqMessage("m2", "2", "3"), probeFor(2, 3), groupstore.Added) {
			t.Error("a message fits a group holding one whose number is not a number")
		}
		if addProbe(t, s, "k", seqMessage("m3", "3", "3"), probeFor(3, 3), groupstore.Added) {
			t.Error("after the summary was built again, a message fits a group holding one whose number is not a number")
		}
		if _, _, err := s.Add(ctx, "k2", seqMessage("m4", "1", "4"), 0); err != nil {
			t.Fatal(err)
		}
		addProbe(t, s, "k2", seqMessage("m5", "2", "3"), probeFor(2, 3), groupstore.Added)
		if addProbe(t, s, "k2", seqMessage("m6", "3", "3"), probeFor(3, 3), groupstore.Added) {
			t.Error("after the summary was built again, a message of size 3 fits a group holding one of size 4")
		}
	})
}

// The summary holds the message's own values: a probe whose values are not
// those of its message's metadata must not write the probe's into it.
func TestAddProbeKeepsTheMessagesOwnValuesNotTheProbes(t *testing.T) {
	forEachSummary(t, func(t *testing.T, s *sqlstore.Store, _ testdb.Backend, _ string) {
		addProbe(t, s, "k", seqMessage("m1", "1", "3"), probeFor(1, 3), groupstore.Added)
		addProbe(t, s, "k", seqMessage("m2", "2", "3"), probeFor(1, 3), groupstore.Added)
		if addProbe(t, s, "k", seqMessage("m3", "2", "3"), probeFor(2, 3), groupstore.Added) {
			t.Error("a message numbered 2 fits a group holding one numbered 2 that was probed as 1")
		}
	})
}

// A summary is of its keys: a probe under other keys reads the messages.
func TestAddProbeUnderOtherKeysDoesNotReadTheSummary(t *testing.T) {
	forEachSummary(t, func(t *testing.T, s *sqlstore.Store, _ testdb.Backend, _ string) {
		addProbe(t, s, "k", seqMessage("m1", "1", "3"), probeFor(1, 3), groupstore.Added)
		msg := groupstore.Message{UUID: "m2", Metadata: map[string]string{"other": "7", "sequence_size": "3"}}
		p := groupstore.Probe{UniqueKey: "other", Unique: 7, SameKey: "sequence_size", Same: 3}
		if addProbe(t, s, "k", msg, p, groupstore.Added) {
			t.Error("a message fits a group holding one without a value under the probe's unique key")
		}
	})
}

// A group of more unreleased messages than the summary keeps is probed by
// reading them.
func TestAddProbeFindsATwinInAGroupLargerThanTheSummary(t *testing.T) {
	forEachSummary(t, func(t *testing.T, s *sqlstore.Store, _ testdb.Backend, _ string) {
		n := dialect.SummaryCap + 10
		for i := 1; i <= n; i++ {
			num := strconv.Itoa(i)
			if !addProbe(t, s, "k", seqMessage("m"+num, num, "100"), probeFor(int64(i), 100), groupstore.Added) {
				t.Fatalf("message %d of a new number does not fit", i)
			}
		}
		if addProbe(t, s, "k", seqMessage("twin", "5", "100"), probeFor(5, 100), groupstore.Added) {
			t.Error("a second message numbered 5 fits a group larger than the summary")
		}
	})
}

// A group table made before script 000008 has no summary columns: AddProbe
// works on it and reads the messages.
func TestAddProbeOnATableWithoutTheSummaryColumnsReadsTheMessages(t *testing.T) {
	testdb.ForEachWhere(t, func(b testdb.Backend) bool { return b.Dialect == jdbc.Postgres }, func(t *testing.T, db testdb.Backend) {
		prefix := ownTables(t, db.DB, sqlstore.Config{}).Prefix
		db.Exec(t, `ALTER TABLE `+prefix+`GROUP DROP COLUMN PROBE_VERSION, DROP COLUMN PROBE_KEYS, DROP COLUMN PROBE_UNIQUE, DROP COLUMN PROBE_SAME`)
		s := newStore(t, db.DB, sqlstore.Config{Prefix: prefix})
		if !addProbe(t, s, "k", seqMessage("m1", "1", "3"), probeFor(1, 3), groupstore.Added) {
			t.Error("the group's first message does not fit")
		}
		if !addProbe(t, s, "k", seqMessage("m2", "2", "3"), probeFor(2, 3), groupstore.Added) {
			t.Error("a second number of the same size does not fit")
		}
		if addProbe(t, s, "k", seqMessage("m3", "2", "3"), probeFor(2, 3), groupstore.Added) {
			t.Error("a second message numbered 2 fits")
		}
	})
}

// A group commit's AddBatch keeps the summaries of its groups as the Add
// alone does.
func TestABatchOfProbingAddsKeepsTheGroupsSummaries(t *testing.T) {
	testdb.ForEachWhere(t, func(b testdb.Backend) bool { return b.Dialect == jdbc.Postgres }, func(t *testing.T, db testdb.Backend) {
		region := testdb.RandomRegion()
		gate := newGateDB(db.DB)
		s := newStore(t, gate, sqlstore.Config{GroupCommit: 1, Region: region})
		addProbe(t, s, "k", seqMessage("m1", "1", "3"), probeFor(1, 3), groupstore.Added)
		p2, p1 := probeFor(2, 3), probeFor(1, 3)
		calls := []*addCall{{key: "k", msg: seqMessage("m2", "2", "3"), probe: &p2}, {key: "k2", msg: seqMessage("n1", "1", "3"), probe: &p1}}
		batched(t, s, gate, calls...)
		for _, c := range calls {
			if c.err != nil || c.outcome != groupstore.Added || !c.fits {
				t.Fatalf("batched AddProbe %s = %v, fits %v, %v; want Added, a fit", c.msg.UUID, c.outcome, c.fits, c.err)
			}
		}
		if n := gate.shared.Load(); n != 1 {
			t.Fatalf("%d shared statements, want 1", n)
		}
		for _, key := range []string{"k", "k2"} {
			if !summaryKept(t, db, region, key) {
				t.Errorf("group %s has no summary after the batch", key)
			}
		}
		if addProbe(t, s, "k", seqMessage("m3", "2", "3"), probeFor(2, 3), groupstore.Added) {
			t.Error("a second message numbered 2 fits the summary that the batch kept")
		}
		if !addProbe(t, s, "k2", seqMessage("n2", "2", "3"), probeFor(2, 3), groupstore.Added) {
			t.Error("a new number does not fit the summary that the batch made")
		}
	})
}

func TestABatchOfProbingAddsOnATableWithoutTheSummaryColumnsRunsThemAlone(t *testing.T) {
	testdb.ForEachWhere(t, func(b testdb.Backend) bool { return b.Dialect == jdbc.Postgres }, func(t *testing.T, db testdb.Backend) {
		prefix := ownTables(t, db.DB, sqlstore.Config{}).Prefix
		db.Exec(t, `ALTER TABLE `+prefix+`GROUP DROP COLUMN PROBE_VERSION, DROP COLUMN PROBE_KEYS, DROP COLUMN PROBE_UNIQUE, DROP COLUMN PROBE_SAME`)
		gate := newGateDB(db.DB)
		s := newStore(t, gate, sqlstore.Config{GroupCommit: 1, Prefix: prefix})
		p2, p1 := probeFor(2, 3), probeFor(1, 3)
		calls := []*addCall{{key: "k", msg: seqMessage("m2", "2", "3"), probe: &p2}, {key: "k2", msg: seqMessage("n1", "1", "3"), probe: &p1}}
		batched(t, s, gate, calls...)
		for _, c := range calls {
			if c.err != nil || c.outcome != groupstore.Added || !c.fits {
				t.Errorf("batched AddProbe %s = %v, fits %v, %v; want Added, a fit", c.msg.UUID, c.outcome, c.fits, c.err)
			}
		}
		if addProbe(t, s, "k", seqMessage("m3", "2", "3"), probeFor(2, 3), groupstore.Added) {
			t.Error("a second message numbered 2 fits")
		}
	})
}

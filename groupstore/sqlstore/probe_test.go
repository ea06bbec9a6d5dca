package sqlstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/lockreg/lockreg/groupstore"
	"github.com/lockreg/lockreg/groupstore/sqlstore"
	"github.com/lockreg/lockreg/internal/testdb"
	"github.com/lockreg/lockreg/jdbc"
)

// seqMessage is a message with the resequencer's sequence metadata.
func seqMessage(id, number, size string) groupstore.Message {
	md := map[string]string{"sequence_number": number}
	if size != "" {
		md["sequence_size"] = size
	}
	return groupstore.Message{UUID: id, Metadata: md}
}

func probeFor(number, size int64) groupstore.Probe {
	return groupstore.Probe{UniqueKey: "sequence_number", Unique: number, SameKey: "sequence_size", Same: size}
}

// addProbe adds msg with p and returns the fit, failing t on an error or
// an outcome other than want.
func addProbe(t *testing.T, s *sqlstore.Store, key string, msg groupstore.Message, p groupstore.Probe, want groupstore.Outcome) bool {
	t.Helper()
	_, o, fits, err := s.AddProbe(context.Background(), key, msg, 0, p)
	if err != nil || o != want {
		t.Fatalf("AddProbe(%s) = %v, %v; want %v", msg.UUID, o, err, want)
	}
	return fits
}

// forEachProber runs test on the backends whose store probes (PostgreSQL),
// and checks on the others that AddProbe adds and reports no fit.
func forEachProber(t *testing.T, test func(t *testing.T, s *sqlstore.Store, db sqlstore.DB)) {
	testdb.ForEach(t, func(t *testing.T, db testdb.Backend) {
		s := newStore(t, db.DB, sqlstore.Config{})
		if db.Dialect != jdbc.Postgres {
			if s.Probes() {
				t.Fatal("Probes() = true, want false: only PostgreSQL probes in its Add")
			}
			if addProbe(t, s, "k", seqMessage("m1", "1", "3"), probeFor(1, 3), groupstore.Added) {
				t.Error("AddProbe without probing reported a fit")
			}
			return
		}
		if !s.Probes() {
			t.Fatal("Probes() = false on PostgreSQL")
		}
		test(t, s, db.DB)
	})
}

func TestAddProbeFitsANewNumberOfTheGroupsSize(t *testing.T) {
	forEachProber(t, func(t *testing.T, s *sqlstore.Store, _ sqlstore.DB) {
		if !addProbe(t, s, "k", seqMessage("m1", "1", "3"), probeFor(1, 3), groupstore.Added) {
			t.Error("the group's first message does not fit")
		}
		if !addProbe(t, s, "k", seqMessage("m2", "2", "3"), probeFor(2, 3), groupstore.Added) {
			t.Error("a second number of the same size does not fit")
		}
	})
}

func TestAddProbeReportsATwinWrittenOtherwise(t *testing.T) {
	forEachProber(t, func(t *testing.T, s *sqlstore.Store, _ sqlstore.DB) {
		addProbe(t, s, "k", seqMessage("m1", "+02", "3"), probeFor(2, 3), groupstore.Added)
		if addProbe(t, s, "k", seqMessage("m2", "2", "3"), probeFor(2, 3), groupstore.Added) {
			t.Error("a second message numbered 2 (the first written +02) fits")
		}
	})
}

func TestAddProbeReportsASizeMismatch(t *testing.T) {
	forEachProber(t, func(t *testing.T, s *sqlstore.Store, _ sqlstore.DB) {
		addProbe(t, s, "k", seqMessage("m1", "1", "3"), probeFor(1, 3), groupstore.Added)
		if addProbe(t, s, "k", seqMessage("m2", "2", "4"), probeFor(2, 4), groupstore.Added) {
			t.Error("a message of size 4 in a group of size 3 fits")
		}
		addProbe(t, s, "k2", seqMessage("m3", "1", ""), probeFor(1, 0), groupstore.Added)
		if addProbe(t, s, "k2", seqMessage("m4", "2", "3"), probeFor(2, 3), groupstore.Added) {
			t.Error("a message of size 3 in a group whose message has no size fits")
		}
	})
}

func TestAddProbeIgnoresReleasedMessagesAndTheMessageItself(t *testing.T) {
	forEachProber(t, func(t *testing.T, s *sqlstore.Store, _ sqlstore.DB) {
		ctx := context.Background()
		addProbe(t, s, "k", seqMessage("m1", "1", "3"), probeFor(1, 3), groupstore.Added)
		if !addProbe(t, s, "k", seqMessage("m1", "1", "3"), probeFor(1, 3), groupstore.Duplicate) {
			t.Error("a redelivery does not fit: it met itself")
		}
		if err := s.Update(ctx, "k", groupstore.Update{Release: []string{"m1"}}); err != nil {
			t.Fatal(err)
		}
		if !addProbe(t, s, "k", seqMessage("m2", "1", "4"), probeFor(1, 4), groupstore.Added) {
			t.Error("a message meeting only a released one of its number and another size does not fit")
		}
	})
}

// A twin that commits while the probing Add waits for the group row is not
// in the snapshot of the Add's statement: the Add must not report a fit.
// The Add is another instance's (a store of its own on the same tables and
// region): a store's own Adds wait for its Locked calls before their
// statements.
func TestAddProbeReportsNoFitAfterAChangeThatCommittedWhileItWaited(t *testing.T) {
	forEachProber(t, func(t *testing.T, _ *sqlstore.Store, db sqlstore.DB) {
		ctx := context.Background()
		region := testdb.RandomRegion()
		s, other := newStore(t, db, sqlstore.Config{Region: region}), newStore(t, db, sqlstore.Config{Region: region})
		addProbe(t, s, "k", seqMessage("m0", "1", "3"), probeFor(1, 3), groupstore.Added)
		fits := make(chan bool, 1)
		err := s.Locked(ctx, "k", func(ctx context.Context, tx groupstore.Store) error {
			if _, _, err := tx.Add(ctx, "k", seqMessage("m1", "2", "3"), 0); err != nil {
				return err
			}
			go func() {
				_, _, f, err := other.AddProbe(ctx, "k", seqMessage("m2", "2", "3"), 0, probeFor(2, 3))
				if err != nil {
					t.Error(err)
				}
				fits <- f
			}()
			waitForALockWait(ctx, t, db)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if <-fits {
			t.Error("the Add that waited for the twin's transaction reported a fit")
		}
	})
}

// waitForALockWait returns once an Add on db (its statement, whose text
// pg_stat_activity may cut short) waits for a lock.
func waitForALockWait(ctx context.Context, t *testing.T, db sqlstore.DB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		var n int
		err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() `+
			`AND wait_event_type = 'Lock' AND (query LIKE 'WITH l AS %' OR query LIKE 'WITH g AS (UPDATE %')`).Scan(&n)
		switch {
		case err != nil:
			t.Fatalf("waiting for the Add to wait: %v", err)
		case n > 0:
			return
		}
		time.Sleep(time.Millisecond)
	}
}

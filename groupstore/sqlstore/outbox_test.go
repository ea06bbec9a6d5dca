package sqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/lockreg/lockreg/groupstore"
	"github.com/lockreg/lockreg/groupstore/sqlstore"
	"github.com/lockreg/lockreg/internal/testdb"
)

// newOutbox returns an outbox in a region of its own on db whose publisher
// inserts rows, failing with fail (when not nil) after inserting them.
func newOutbox(t *testing.T, db testdb.Backend, fail error) (*sqlstore.Outbox, string) {
	t.Helper()
	region := testdb.RandomRegion()
	ob, err := sqlstore.NewOutbox(newStore(t, db.DB, sqlstore.Config{Region: region}), db.RowPublishers(t, region, fail))
	if err != nil {
		t.Fatal(err)
	}
	return ob, region
}

// newOutboxGroup returns newOutbox's outbox and region, and the group "k"
// it holds with one message.
func newOutboxGroup(t *testing.T, db testdb.Backend, fail error) (*sqlstore.Outbox, string, groupstore.Group) {
	t.Helper()
	ob, region := newOutbox(t, db, fail)
	g, _, err := ob.Add(context.Background(), "k", groupstore.Message{UUID: "m1"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	return ob, region, g
}

func TestOutboxCommitsTheUpdateAndThePublishTogether(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, db testdb.Backend) {
		ob, region, g := newOutboxGroup(t, db, nil)
		err := ob.UpdatePublish(context.Background(), "k", groupstore.Update{IfVersion: g.Version, ReleaseAll: true, Complete: true},
			"out", message.NewMessage("o1", nil))
		if err != nil {
			t.Fatalf("UpdatePublish: %v", err)
		}
		if got := db.Published(t, region, "out"); len(got) != 1 || got[0] != "o1" {
			t.Errorf("published %v, want [o1]", got)
		}
		after, err := ob.Get(context.Background(), "k")
		if err != nil {
			t.Fatal(err)
		}
		if !after.Complete || after.Size != 0 || after.Version != g.Version+1 {
			t.Errorf("group after UpdatePublish: complete %v, size %d, version %d", after.Complete, after.Size, after.Version)
		}
	})
}

func TestOutboxPublishFailureLeavesTheGroupUnchanged(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, db testdb.Backend) {
		broker := errors.New("broker refused")
		ob, region, g := newOutboxGroup(t, db, broker)
		err := ob.UpdatePublish(context.Background(), "k", groupstore.Update{IfVersion: g.Version, ReleaseAll: true, Complete: true},
			"out", message.NewMessage("o1", nil))
		if !errors.Is(err, broker) {
			t.Fatalf("UpdatePublish = %v, want the publisher's error", err)
		}
		if got := db.Published(t, region, "out"); len(got) != 0 {
			t.Errorf("published %v after a failed publish, want nothing", got)
		}
		after, err := ob.Get(context.Background(), "k")
		if err != nil {
			t.Fatal(err)
		}
		if after.Complete || after.Size != 1 || after.Version != g.Version {
			t.Errorf("group after a failed publish: complete %v, size %d, version %d; want it unchanged",
				after.Complete, after.Size, after.Version)
		}
	})
}

func TestOutboxVersionConflictPublishesNothing(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, db testdb.Backend) {
		ob, region, g := newOutboxGroup(t, db, nil)
		err := ob.UpdatePublish(context.Background(), "k", groupstore.Update{IfVersion: g.Version + 1, Complete: true},
			"out", message.NewMessage("o1", nil))
		if !errors.Is(err, groupstore.ErrConflict) {
			t.Fatalf("UpdatePublish with a stale version = %v, want ErrConflict", err)
		}
		if got := db.Published(t, region, "out"); len(got) != 0 {
			t.Errorf("published %v on a conflict, want nothing", got)
		}
	})
}

func TestNewOutboxRejectsMissingParts(t *testing.T) {
	store := newStore(t, testdb.SQLite(t).DB, sqlstore.Config{})
	if _, err := sqlstore.NewOutbox(nil, func(*sql.Tx) (message.Publisher, error) { return nil, nil }); err == nil {
		t.Error("nil store accepted")
	}
	if _, err := sqlstore.NewOutbox(store, nil); err == nil {
		t.Error("nil publisher function accepted")
	}
}

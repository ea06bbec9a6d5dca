package sqlstore_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"time"

	_ "modernc.org/sqlite"

	"github.com/lockreg/lockreg/groupstore"
	"github.com/lockreg/lockreg/groupstore/sqlstore"
)

// An operator's view of the message groups: the open ones, one with its
// messages, and one made due for the handler's timeout runner.
func ExampleStore_Groups() {
	dir, err := os.MkdirTemp("", "lockreg-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "groups.db")+"?_pragma=busy_timeout(5000)")
	if err != nil {
		panic(err)
	}
	defer db.Close()
	ctx := context.Background()
	if err := sqlstore.CreateSchema(ctx, db, sqlstore.Config{}); err != nil {
		panic(err)
	}
	s, err := sqlstore.New(db, sqlstore.Config{DisableCleanup: true})
	if err != nil {
		panic(err)
	}
	defer s.Close(ctx)
	s.Add(ctx, "order-7", groupstore.Message{UUID: "m1", Payload: []byte("first")}, time.Hour)

	open, err := s.Groups(ctx, sqlstore.GroupFilter{State: sqlstore.OpenGroups})
	if err != nil {
		panic(err)
	}
	for _, g := range open {
		fmt.Println(g.Key, "holds", g.Size, "message(s)")
	}
	_, msgs, err := s.Inspect(ctx, "order-7")
	if err != nil {
		panic(err)
	}
	fmt.Println(msgs[0].UUID, msgs[0].PayloadSize, "bytes")
	if err := s.Expire(ctx, "order-7"); err != nil {
		panic(err)
	}
	due, _ := s.Groups(ctx, sqlstore.GroupFilter{State: sqlstore.DueGroups})
	fmt.Println("due:", len(due))
	// Output:
	// order-7 holds 1 message(s)
	// m1 5 bytes
	// due: 1
}

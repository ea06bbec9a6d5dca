package scheduler_test

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/lockreg/lockreg/internal/testdb"
	"github.com/lockreg/lockreg/jdbc"
	"github.com/lockreg/lockreg/scheduler"
)

func TestCreateSchemaFromManyReplicasAtOnceMakesOneTable(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, b testdb.Backend) {
		table := "st_" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
		t.Cleanup(func() { b.DB.ExecContext(ctxb, `DROP TABLE `+table) })
		var wg sync.WaitGroup
		errs := make(chan error, 6)
		for range 6 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- scheduler.CreateSchema(ctxb, b.DB, scheduler.Config{Table: table})
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		c := newClient(t, b, scheduler.Config{Table: table})
		if err := c.Schedule(ctxb, scheduler.Instance{Task: "t", ID: "1"}, time.Now()); err != nil {
			t.Fatal(err)
		}
		if err := scheduler.CreateSchema(ctxb, b.DB, scheduler.Config{Table: table}); err != nil {
			t.Fatalf("again: %v", err)
		}
		if row(t, c, "t", "1") == nil {
			t.Fatal("CreateSchema of an existing table lost its rows")
		}
	})
}

func TestAMissingTableIsErrNoTable(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, b testdb.Backend) {
		c := newClient(t, b, scheduler.Config{Table: "st_missing_table"})
		err := c.Schedule(ctxb, scheduler.Instance{Task: "t", ID: "1"}, time.Now())
		if !errors.Is(err, scheduler.ErrNoTable) {
			t.Fatalf("Schedule: %v, want ErrNoTable", err)
		}
		s, err := scheduler.New(b.DB, scheduler.Config{Table: "st_missing_table", Tasks: []scheduler.Task{recorder("t", newRuns())}})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Start(ctxb); !errors.Is(err, scheduler.ErrNoTable) {
			t.Fatalf("Start: %v, want ErrNoTable", err)
		}
	})
}

func TestABadConfigIsErrInvalidConfigNamingTheField(t *testing.T) {
	b := testdb.SQLite(t)
	for field, cfg := range map[string]scheduler.Config{
		"Table":             {Table: "drop table x;"},
		"Name":              {Name: strings.Repeat("n", 51)},
		"Threads":           {Threads: -1},
		"PollInterval":      {PollInterval: -time.Second},
		"TimeZone":          {TimeZone: time.Local},
		"Dialect":           {Dialect: "oracle"},
		"HeartbeatInterval": {HeartbeatInterval: -1},
	} {
		_, err := scheduler.NewClient(b.DB, cfg)
		if !errors.Is(err, scheduler.ErrInvalidConfig) || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: %v, want ErrInvalidConfig naming it", field, err)
		}
	}
	if _, err := scheduler.NewClient(b.DB, scheduler.Config{Listener: listener(t, testdb.Backend{}), Dialect: jdbc.SQLite}); !errors.Is(err, scheduler.ErrInvalidConfig) {
		t.Errorf("a Listener on SQLite: %v", err)
	}
}

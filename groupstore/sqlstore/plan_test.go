package sqlstore_test

import (
	"context"
	"database/sql"
	"strconv"
	"strings"
	"testing"

	"github.com/lockreg/lockreg/groupstore"
	"github.com/lockreg/lockreg/groupstore/sqlstore"
	"github.com/lockreg/lockreg/internal/testdb"
)

// ownTables creates group tables of a new prefix, dropped when t ends,
// and returns cfg with that prefix: tables whose statistics the test sets.
func ownTables(t *testing.T, db *sql.DB, cfg sqlstore.Config) sqlstore.Config {
	t.Helper()
	cfg.Prefix = ownPrefix(t, db, "SP")
	if err := sqlstore.CreateSchema(context.Background(), db, cfg); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// The statistics of a table shared by several regions say little of a
// region that began after the last ANALYZE: to PostgreSQL's planner each
// of its conditions matches one row. A look-up of one group must still
// read it by the primary key: before script 000006 the due groups' index
// (REGION, DUE_AT) looked as cheap and the planner read every group of the
// region through it.
func TestAGroupIsReadByItsPrimaryKeyInANewRegion(t *testing.T) {
	db := testdb.Postgres(t)
	ctx := context.Background()
	prefix := ownTables(t, db.DB, sqlstore.Config{}).Prefix
	insert := func(region string) {
		db.Exec(t, `INSERT INTO `+prefix+`GROUP (GROUP_KEY, REGION, CORRELATION_KEY, GROUP_ID, COMPLETE, LAST_RELEASED_SEQUENCE, `+
			`RELEASES, MESSAGE_COUNT, LAST_POSITION, VERSION, DUE_AT, CREATED_DATE, UPDATED_DATE) `+
			`SELECT lpad(i::text, 36, '0'), '`+region+`', i::text, lpad(i::text, 36, '0'), 0, 0, 0, 1, 1, 1, now(), now(), now() `+
			`FROM generate_series(1, 5000) i`)
	}
	insert("old")
	db.Exec(t, `ANALYZE `+prefix+`GROUP`)
	insert("new")
	var plan []string
	rows, err := db.DB.QueryContext(ctx, `EXPLAIN SELECT VERSION FROM `+prefix+`GROUP WHERE GROUP_KEY = '`+
		strings.Repeat("0", 32)+`4711' AND REGION = 'new' FOR UPDATE`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, line)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(plan, "\n"); !strings.Contains(got, strings.ToLower(prefix)+"group_pk") {
		t.Errorf("the look-up of one group does not use the primary key:\n%s", got)
	}
}

// PostgreSQL plans a prepared statement for its parameters' values five
// times, then keeps a generic plan unless that looks dearer than the
// custom ones. A release read its group's messages by the key's value, and
// for a key outside the column's most common values (most keys, once a
// few large groups are among them) the custom plan looked cheaper, so
// every release was planned again, which took as long as running it. The
// release must get the generic plan.
func TestAReleaseIsNotPlannedAgainAtEveryCall(t *testing.T) {
	db, _ := testdb.CountingPostgres(t)
	db.SetMaxOpenConns(1) // one connection: its prepared statements are the store's
	ctx := context.Background()
	cfg := ownTables(t, db, sqlstore.Config{Region: "r", DisableCleanup: true})
	prefix := cfg.Prefix
	// 100 groups of 200 messages and 5 000 of one: statistics whose most
	// common keys are the large groups.
	if _, err := db.ExecContext(ctx, `INSERT INTO `+prefix+`GROUP_MESSAGE (GROUP_KEY, REGION, MESSAGE_KEY, MESSAGE_ID, `+
		`POSITION, RELEASED, CREATED_DATE) SELECT lpad((CASE WHEN i <= 20000 THEN i % 100 ELSE i END)::text, 36, '0'), 'r', `+
		`lpad(i::text, 36, '0'), i::text, 1, 0, now() FROM generate_series(1, 25000) i`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `ANALYZE `+prefix+`GROUP_MESSAGE`); err != nil {
		t.Fatal(err)
	}
	s := newStore(t, db, cfg)
	for i := range 12 {
		key := "g" + strconv.Itoa(i)
		if _, _, err := s.Add(ctx, key, groupstore.Message{UUID: "m"}, 0); err != nil {
			t.Fatal(err)
		}
		err := s.Locked(ctx, key, func(ctx context.Context, tx groupstore.Store) error {
			return tx.Update(ctx, key, groupstore.Update{ReleaseAll: true, Complete: true})
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	var generic, custom int64
	err := db.QueryRowContext(ctx, `SELECT generic_plans, custom_plans FROM pg_prepared_statements `+
		`WHERE statement LIKE 'WITH r AS (UPDATE %'`).Scan(&generic, &custom)
	if err != nil {
		t.Fatal(err)
	}
	if generic == 0 {
		t.Errorf("the release was planned for its values at each of %d calls, never generically", custom)
	}
}

package sqlstore_test

import (
	"context"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/lockreg/lockreg/groupstore/sqlstore"
	"github.com/lockreg/lockreg/internal/testdb"
)

// The statistics of a table shared by several regions say little of a
// region that began after the last ANALYZE: to PostgreSQL's planner each
// of its conditions matches one row. A look-up of one group must still
// read it by the primary key: before script 000006 the due groups' index
// (REGION, DUE_AT) looked as cheap and the planner read every group of the
// region through it.
func TestAGroupIsReadByItsPrimaryKeyInANewRegion(t *testing.T) {
	db := testdb.Postgres(t)
	ctx := context.Background()
	prefix := "SP" + strings.ToUpper(strings.ReplaceAll(uuid.NewString(), "-", "")[:12]) + "_"
	t.Cleanup(func() {
		for _, s := range []string{"GROUP_MESSAGE", "GROUP"} {
			db.Exec(t, `DROP TABLE IF EXISTS `+prefix+s)
		}
	})
	if err := sqlstore.CreateSchema(ctx, db.DB, sqlstore.Config{Prefix: prefix}); err != nil {
		t.Fatal(err)
	}
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

package dialect

import (
	"errors"
	"slices"
	"testing"
)

func TestCompileExpandsMacrosAndNumbersParameters(t *testing.T) {
	q, err := Postgres.Compile(`UPDATE {prefix}LOCK SET EXPIRED_AFTER = {now+:ttl} WHERE REGION = :region AND EXPIRED_AFTER < {now}`,
		"P_", TTL, Region)
	if err != nil {
		t.Fatal(err)
	}
	want := `UPDATE P_LOCK SET EXPIRED_AFTER = timezone('UTC', now()) + CAST($1 AS BIGINT) * INTERVAL '1 microsecond' ` +
		`WHERE REGION = $2 AND EXPIRED_AFTER < timezone('UTC', now())`
	if q.SQL != want || !slices.Equal(q.Names, []string{TTL, Region}) {
		t.Fatalf("got %q %v\nwant %q [ttl region]", q.SQL, q.Names, want)
	}
}

func TestCompileUsesQuestionMarksOutsidePostgres(t *testing.T) {
	q, err := MySQL.Compile(`SELECT :a, :b, :a FROM {prefix}LOCK WHERE EXPIRED_AFTER < {now-:b}`, "INT_", "a", "b")
	if err != nil {
		t.Fatal(err)
	}
	want := `SELECT ?, ?, ? FROM INT_LOCK WHERE EXPIRED_AFTER < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND`
	if q.SQL != want || !slices.Equal(q.Names, []string{"a", "b", "a", "b"}) {
		t.Fatalf("got %q %v", q.SQL, q.Names)
	}
}

func TestCompileLeavesQuotesCommentsAndCastsAlone(t *testing.T) {
	tmpl := `SELECT ':x {now}', ":y", x::text, ` + "`:z`" + ` -- :c {now}
/* :d {past} */ FROM t WHERE a = :a`
	q, err := Postgres.Compile(tmpl, "INT_", "a")
	if err != nil {
		t.Fatal(err)
	}
	want := `SELECT ':x {now}', ":y", x::text, ` + "`:z`" + ` -- :c {now}
/* :d {past} */ FROM t WHERE a = $1`
	if q.SQL != want || !slices.Equal(q.Names, []string{"a"}) {
		t.Fatalf("got %q %v\nwant %q", q.SQL, q.Names, want)
	}
}

func TestCompileListTakesAsManyPlaceholdersAsValues(t *testing.T) {
	q, err := Postgres.Compile(`DELETE FROM t WHERE r = :r AND k IN {list} AND v = :v`, "", "r", "v")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := q.WithList(3), `DELETE FROM t WHERE r = $1 AND k IN ($2, $3, $4) AND v = $5`; got != want {
		t.Fatalf("WithList(3) = %q, want %q", got, want)
	}
	args := q.Args(func(name string) any { return name }, "k1", "k2", "k3")
	if !slices.Equal(args, []any{"r", "k1", "k2", "k3", "v"}) {
		t.Fatalf("Args = %v", args)
	}
}

func TestCompileRefusesWhatTheRuleDoesNotKnow(t *testing.T) {
	for _, tmpl := range []string{
		`SELECT :nope`,
		`SELECT {nope}`,
		`SELECT {now+:nope}`,
		`SELECT 'open`,
		`SELECT {now`,
		`SELECT 1 /* open`,
		`SELECT {list}, {list}`,
	} {
		if _, err := SQLite.Compile(tmpl, "INT_", "a"); !errors.Is(err, ErrTemplate) {
			t.Errorf("Compile(%q): %v; want ErrTemplate", tmpl, err)
		}
	}
}

func TestEveryBuiltInStatementCompiles(t *testing.T) {
	all := append(append([]string(nil), CustomParams...), Retention, Batch)
	for _, d := range registered {
		l := d.Lock
		statements := []string{l.Acquire, l.Renew, l.ReleaseAfter, l.Sweep, l.SweepKeys, Release, ExpireMine, SelectMine, CheckLock}
		if q := l.Queue; q != nil {
			statements = append(statements, q.AcquireOrWait, q.Release, q.Handed, q.Leave, q.Sweep)
		}
		for _, s := range statements {
			if _, err := d.Compile(s, "INT_", all...); err != nil {
				t.Errorf("%s: %v\n%s", d.Name, err, s)
			}
		}
		g := d.Group
		for _, s := range []string{g.Upsert, g.LockGroup, g.InsertMessage, g.AddMessage[0], g.AddMessage[1], g.AddProbe[0], g.AddProbe[1], g.AddInPlace[0][0], g.AddInPlace[0][1], g.AddInPlace[1][0], g.AddInPlace[1][1], g.AddBatch[0], g.AddBatch[1], g.LockRow, g.ClaimDue, g.SweepMessages, g.SweepGroups, g.SelectFinished} {
			if _, err := d.Compile(s, "INT_", GroupParams...); err != nil {
				t.Errorf("%s: %v\n%s", d.Name, err, s)
			}
		}
	}
}

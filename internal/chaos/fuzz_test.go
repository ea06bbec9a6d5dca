//go:build chaos

package chaos

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/lockreg/lockreg/internal/testdb"
)

// Four processes of four goroutines each take locks on three keys in
// turn; every hold increments its key's counter with a read-modify-write
// guarded by its fencing token and records its holding interval in the
// database's clock. No increment may be lost or refused, and no two
// holding intervals of a key may overlap.
func TestProcessesNeverHoldAKeyTogetherNorLoseAnUpdate(t *testing.T) {
	const (
		procs   = 4
		workers = 4
	)
	iterations := scale(25)
	keys := []string{"fuzz-a", "fuzz-b", "fuzz-c"}
	for _, b := range allBackends(t) {
		t.Run(b.Name, func(t *testing.T) {
			b.Require(t)
			run := newRun()
			seedCounters(t, b, run, keys)

			ctx, cancel := context.WithTimeout(context.Background(), time.Duration(scale(4))*time.Minute)
			defer cancel()
			var wg sync.WaitGroup
			outputs := make([][]byte, procs)
			errs := make([]error, procs)
			for p := range procs {
				c := child{mode: "fuzz", b: b, run: run, keys: keys, proc: p, workers: workers,
					iterations: iterations, ttl: 10 * time.Second}
				wg.Go(func() { outputs[p], errs[p] = c.command(ctx).CombinedOutput() })
			}
			wg.Wait()
			for p := range procs {
				if errs[p] != nil {
					t.Errorf("process %d: %v\n%s", p, errs[p], outputs[p])
				}
			}

			want := map[string]int64{}
			for p := range procs {
				for w := range workers {
					for i := range iterations {
						want[keyOf(keys, p, w, i)]++
					}
				}
			}
			total := 0
			for _, k := range keys {
				n, _ := counter(t, b, run, k)
				if n != want[k] {
					t.Errorf("key %s: counter %d, want %d: updates were lost", k, n, want[k])
				}
				total += int(n)
				checkIntervals(t, b, run, k, want[k])
			}
			t.Logf("%s: %d processes x %d goroutines, %d keys: %d acquisitions, counters exact, intervals disjoint",
				b.Name, procs, workers, len(keys), total)
		})
	}
}

// checkIntervals asserts that key has want recorded holds whose intervals,
// ordered by acquisition, never overlap and whose tokens increase.
func checkIntervals(t *testing.T, b testdb.Backend, run, key string, want int64) {
	t.Helper()
	type interval struct {
		Token, Acquired, Released int64
		Proc                      int
	}
	var got []interval
	rows, err := b.DB.Query(b.Q(`SELECT token, proc, acquired, released FROM chaos_interval WHERE run = ? AND k = ? ORDER BY acquired, released`), run, key)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var i interval
		if err := rows.Scan(&i.Token, &i.Proc, &i.Acquired, &i.Released); err != nil {
			t.Fatal(err)
		}
		got = append(got, i)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if int64(len(got)) != want {
		t.Errorf("key %s: %d holds recorded, want %d", key, len(got), want)
	}
	for i := 1; i < len(got); i++ {
		prev, cur := got[i-1], got[i]
		if cur.Acquired < prev.Released {
			t.Errorf("key %s: two holders at once: process %d held [%d, %d] (token %d) and process %d [%d, %d] (token %d)",
				key, prev.Proc, prev.Acquired, prev.Released, prev.Token, cur.Proc, cur.Acquired, cur.Released, cur.Token)
		}
		if cur.Token <= prev.Token {
			t.Errorf("key %s: token %d of a later hold is not greater than %d of an earlier one", key, cur.Token, prev.Token)
		}
	}
}

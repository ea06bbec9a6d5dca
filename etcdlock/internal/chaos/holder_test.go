package chaos

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockreg/lockreg/etcdlock"
	"github.com/lockreg/lockreg/registry"
)

// Lock holders are child processes too, each with its own etcd client,
// repository and registry (keep-alive on). Each records its holds in the
// ledger, a file shared by the test's processes that every record is
// appended to with one write (O_APPEND): the order of its lines is the
// order in which the writes happened, across processes.
//
//	ENTER p token  process p holds the key, with token (written after LockContext returned)
//	EXIT p token   p is about to release it (written before UnlockContext)
//	LOST p token   p's Done closed while it held it
//	KILLED p       the parent killed p (SIGKILL): it does nothing any more
//	MARK text      the parent's note of a fault, for counting holds after it
//
// The holder modes:
//
//	cycle  take the key, hold it for a moment, release it; again, for
//	       the given iterations or, with 0, until told "STOP"
//	hold   take the key, print "HELD token", then wait: print "LOST" when
//	       Done closes, renew it when told "RENEW" (print "RENEWED"), or
//	       release it when told "RELEASE" (print "RELEASED")

// The environment of a holder child.
const (
	endpointsEnv = "LOCKREG_ETCD_CHAOS_ENDPOINTS"
	regionEnv    = "LOCKREG_ETCD_CHAOS_REGION"
	keyEnv       = "LOCKREG_ETCD_CHAOS_KEY"
	procEnv      = "LOCKREG_ETCD_CHAOS_PROC"
	ttlEnv       = "LOCKREG_ETCD_CHAOS_TTL"
	holdForEnv   = "LOCKREG_ETCD_CHAOS_HOLD_FOR"
	itersEnv     = "LOCKREG_ETCD_CHAOS_ITERATIONS"
	ledgerEnv    = "LOCKREG_ETCD_CHAOS_LEDGER"
)

// holder describes a holder child.
type holder struct {
	mode       string
	endpoints  []string
	region     string
	key        string
	proc       int
	ttl        time.Duration
	holdFor    time.Duration
	iterations int // cycle: 0 is until "STOP"
	ledger     *ledger
}

// start starts the child, killed when t ends.
func (h holder) start(t *testing.T) *proc {
	t.Helper()
	return startProc(t, fmt.Sprintf("%s holder %d", h.mode, h.proc), h.mode,
		endpointsEnv+"="+strings.Join(h.endpoints, ","), regionEnv+"="+h.region, keyEnv+"="+h.key,
		procEnv+"="+strconv.Itoa(h.proc), ttlEnv+"="+h.ttl.String(), holdForEnv+"="+h.holdFor.String(),
		itersEnv+"="+strconv.Itoa(h.iterations), ledgerEnv+"="+h.ledger.path)
}

// runHolder is the body of a holder child.
func runHolder(mode string) error {
	h := holder{mode: mode, endpoints: strings.Split(os.Getenv(endpointsEnv), ","), region: os.Getenv(regionEnv),
		key: os.Getenv(keyEnv), ledger: &ledger{path: os.Getenv(ledgerEnv)}}
	var err error
	if h.proc, err = strconv.Atoi(os.Getenv(procEnv)); err != nil {
		return err
	}
	if h.iterations, err = strconv.Atoi(os.Getenv(itersEnv)); err != nil {
		return err
	}
	if h.ttl, err = time.ParseDuration(os.Getenv(ttlEnv)); err != nil {
		return err
	}
	if h.holdFor, err = time.ParseDuration(os.Getenv(holdForEnv)); err != nil {
		return err
	}
	cmds := stdinCommands()
	cli, err := clientv3.New(clientConfig(h.endpoints))
	if err != nil {
		return err
	}
	defer cli.Close()
	logErr := func(err error) { fmt.Fprintf(os.Stderr, "holder %d: %v\n", h.proc, err) }
	repo, err := etcdlock.New(cli, etcdlock.WithRegion(h.region), etcdlock.WithClientID(fmt.Sprintf("holder-%d", h.proc)),
		etcdlock.WithErrorHandler(logErr))
	if err != nil {
		return err
	}
	reg, err := registry.New(repo, registry.WithTTL(h.ttl), registry.WithKeepAlive(),
		registry.WithIdleBetweenTries(50*time.Millisecond),
		registry.WithErrorHandler(func(_ string, err error) { logErr(err) }))
	if err != nil {
		return err
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		reg.Close(ctx)
		repo.Close(ctx)
	}()
	if mode == "hold" {
		return h.hold(reg, cmds)
	}
	return h.cycle(reg, cmds)
}

func (h holder) cycle(reg *registry.Registry, cmds <-chan string) error {
	l := reg.Obtain(h.key)
	for i := 0; h.iterations == 0 || i < h.iterations; i++ {
		select {
		case cmd := <-cmds:
			if cmd == "STOP" {
				fmt.Println("STOPPED")
				return nil
			}
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if err := l.LockContext(ctx); err != nil {
			cancel()
			return fmt.Errorf("iteration %d: %w", i, err)
		}
		token := l.Token()
		if err := h.ledger.append("ENTER %d %d", h.proc, token); err != nil {
			cancel()
			return err
		}
		kind := "EXIT"
		select {
		case <-l.Done():
			kind = "LOST"
		case <-time.After(h.holdFor):
		}
		if err := h.ledger.append("%s %d %d", kind, h.proc, token); err != nil {
			cancel()
			return err
		}
		if err := l.UnlockContext(ctx); err != nil && kind == "EXIT" {
			fmt.Fprintf(os.Stderr, "holder %d: unlock of token %d: %v\n", h.proc, token, err)
		}
		cancel()
	}
	fmt.Println("FINISHED")
	return nil
}

func (h holder) hold(reg *registry.Registry, cmds <-chan string) error {
	l := reg.Obtain(h.key)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := l.LockContext(ctx); err != nil {
		return err
	}
	token := l.Token()
	if err := h.ledger.append("ENTER %d %d", h.proc, token); err != nil {
		return err
	}
	fmt.Printf("HELD %d\n", token)
	for {
		select {
		case <-l.Done():
			if err := h.ledger.append("LOST %d %d", h.proc, token); err != nil {
				return err
			}
			fmt.Println("LOST")
			for cmd := range cmds { // until killed
				if cmd == "STOP" {
					return nil
				}
			}
		case cmd := <-cmds:
			if cmd == "RENEW" {
				rctx, rcancel := context.WithTimeout(context.Background(), 30*time.Second)
				err := l.Renew(rctx)
				rcancel()
				if err != nil {
					return fmt.Errorf("renewal of token %d: %w", token, err)
				}
				fmt.Println("RENEWED")
				continue
			}
			if cmd != "RELEASE" {
				continue
			}
			if err := h.ledger.append("EXIT %d %d", h.proc, token); err != nil {
				return err
			}
			uctx, ucancel := context.WithTimeout(context.Background(), 30*time.Second)
			err := l.UnlockContext(uctx)
			ucancel()
			if err != nil {
				return fmt.Errorf("unlock of token %d: %w", token, err)
			}
			fmt.Println("RELEASED")
			for cmd := range cmds {
				if cmd == "STOP" {
					return nil
				}
			}
		}
	}
}

// ledger is the shared record of holds (see above).
type ledger struct {
	path string
	mu   sync.Mutex // the parent's appends
}

func newLedger(t *testing.T) *ledger {
	t.Helper()
	l := &ledger{path: t.TempDir() + "/ledger"}
	if err := os.WriteFile(l.path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return l
}

// append writes one record with one write.
func (l *ledger) append(format string, args ...any) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	f, err := os.OpenFile(l.path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(fmt.Sprintf(format, args...) + "\n"); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func (l *ledger) mark(t *testing.T, format string, args ...any) {
	t.Helper()
	if err := l.append("MARK "+format, args...); err != nil {
		t.Fatal(err)
	}
}

// record is one line of the ledger.
type record struct {
	kind  string // ENTER, EXIT, LOST, KILLED, MARK
	proc  int
	token int64
	text  string // of a MARK
}

func (l *ledger) read(t *testing.T) []record {
	t.Helper()
	b, err := os.ReadFile(l.path)
	if err != nil {
		t.Fatal(err)
	}
	var recs []record
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" {
			continue // the last, or one being written
		}
		var r record
		f := strings.Fields(line)
		r.kind = f[0]
		switch {
		case r.kind == "MARK":
			r.text = strings.TrimPrefix(line, "MARK ")
		case r.kind == "KILLED" && len(f) == 2:
			r.proc, err = strconv.Atoi(f[1])
		case len(f) == 3:
			if r.proc, err = strconv.Atoi(f[1]); err == nil {
				r.token, err = strconv.ParseInt(f[2], 10, 64)
			}
		default:
			err = fmt.Errorf("bad record")
		}
		if err != nil {
			t.Fatalf("ledger line %q: %v", line, err)
		}
		recs = append(recs, r)
	}
	return recs
}

// enters counts the ENTER records, and those after the MARK text, if any.
func enters(recs []record, after string) (all, since int) {
	seen := after == ""
	for _, r := range recs {
		switch {
		case r.kind == "MARK" && r.text == after:
			seen = true
		case r.kind == "ENTER":
			all++
			if seen {
				since++
			}
		}
	}
	return all, since
}

// entered returns the ENTER record of proc, if any.
func entered(recs []record, proc int) (record, bool) {
	for _, r := range recs {
		if r.kind == "ENTER" && r.proc == proc {
			return r, true
		}
	}
	return record{}, false
}

func has(recs []record, kind string, proc int) bool {
	for _, r := range recs {
		if r.kind == kind && r.proc == proc {
			return true
		}
	}
	return false
}

// check fails t for every double holder (an ENTER while another hold has
// not ended by EXIT, LOST or KILLED), every token that is not greater than
// the one before, and every end of a hold that is not the current one's.
// It returns the number of holds.
func check(t *testing.T, recs []record) int {
	t.Helper()
	var cur *record
	var last int64
	holds, bad := 0, 0
	for i := range recs {
		r := recs[i]
		switch r.kind {
		case "ENTER":
			holds++
			if cur != nil {
				bad++
				t.Errorf("ledger line %d: process %d entered with token %d while process %d held token %d", i+1, r.proc, r.token, cur.proc, cur.token)
			}
			if r.token <= last {
				bad++
				t.Errorf("ledger line %d: token %d of process %d is not greater than the one before, %d", i+1, r.token, r.proc, last)
			}
			last = r.token
			cur = &recs[i]
		case "EXIT", "LOST":
			if cur == nil || cur.proc != r.proc || cur.token != r.token {
				bad++
				t.Errorf("ledger line %d: %s of process %d token %d, which was not the holder (%+v)", i+1, r.kind, r.proc, r.token, cur)
			}
			cur = nil
		case "KILLED":
			if cur != nil && cur.proc == r.proc {
				cur = nil
			}
		}
	}
	if bad > 0 {
		t.Logf("ledger:\n%s", dump(recs))
	}
	return holds
}

func dump(recs []record) string {
	var b strings.Builder
	for _, r := range recs {
		if r.kind == "MARK" {
			fmt.Fprintf(&b, "MARK %s\n", r.text)
		} else {
			fmt.Fprintf(&b, "%s %d %d\n", r.kind, r.proc, r.token)
		}
	}
	return b.String()
}

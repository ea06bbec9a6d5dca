package testharness

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"sync"
)

// childStats is a child's report.
type childStats struct{ handled, failed, lockErrors int64 }

// reportWriter is a child's standard output: it parses the report lines.
type reportWriter struct {
	ready chan struct{} // closed at the ready line
	// events receives the report lines of other verbs, without the
	// prefix, for tests whose children report more; a line that finds it
	// full is dropped.
	events chan string

	mu       sync.Mutex
	partial  []byte
	outbox   bool // set before ready is closed
	latest   childStats
	isFinal  bool
	readyHit bool
}

func newReportWriter() *reportWriter {
	return &reportWriter{ready: make(chan struct{}), events: make(chan string, 64)}
}

func (w *reportWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.partial = append(w.partial, p...)
	for {
		i := bytes.IndexByte(w.partial, '\n')
		if i < 0 {
			break
		}
		w.line(string(w.partial[:i]))
		w.partial = w.partial[i+1:]
	}
	return len(p), nil
}

// line handles one line, under w.mu.
func (w *reportWriter) line(l string) {
	rest, ok := strings.CutPrefix(l, reportPrefix)
	if !ok {
		return // children print nothing else; the test framework might
	}
	verb, args, _ := strings.Cut(rest, " ")
	fields := map[string]string{}
	for _, f := range strings.Fields(args) {
		k, v, _ := strings.Cut(f, "=")
		fields[k] = v
	}
	num := func(k string) int64 { n, _ := strconv.ParseInt(fields[k], 10, 64); return n }
	switch verb {
	case "ready":
		if !w.readyHit {
			w.readyHit = true
			w.outbox = fields["outbox"] == "true"
			close(w.ready)
		}
	case "stats", "final":
		w.latest = childStats{handled: num("handled"), failed: num("failed"), lockErrors: num("lockerrors")}
		w.isFinal = w.isFinal || verb == "final"
	default:
		select {
		case w.events <- rest:
		default:
		}
	}
}

func (w *reportWriter) last() childStats {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.latest
}

func (w *reportWriter) final() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.isFinal
}

func (w *reportWriter) stats() string {
	s := w.last()
	return fmt.Sprintf("%d handled, %d failed", s.handled, s.failed)
}

// tailWriter keeps the last max bytes written to it.
type tailWriter struct {
	max int
	mu  sync.Mutex
	buf []byte
	cut bool
}

func (w *tailWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	if len(w.buf) > w.max {
		w.buf = append([]byte(nil), w.buf[len(w.buf)-w.max:]...)
		w.cut = true
	}
	return len(p), nil
}

func (w *tailWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cut {
		return "...\n" + string(w.buf)
	}
	return string(w.buf)
}

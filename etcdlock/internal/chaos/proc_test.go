package chaos

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// proc is a child process: the test binary re-executed with childEnv set,
// so that TestMain runs its job instead of the tests. The child exits when
// its standard input closes, so that none outlives a parent that died;
// the test's clean-up kills it with SIGKILL and waits for it.
type proc struct {
	name   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string // its standard output, a line at a time
	stderr *limitedBuffer
	exited chan struct{} // closed once it has exited
	err    error         // why it exited, once exited is closed
}

// startProc starts a child that runs mode with env added to the parent's
// environment, killed when t ends.
func startProc(t *testing.T, name, mode string, env ...string) *proc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), childEnv+"="+mode), env...)
	p := &proc{name: name, cmd: cmd, lines: make(chan string, 1024), stderr: &limitedBuffer{}, exited: make(chan struct{})}
	cmd.Stdout = &lineWriter{c: p.lines}
	cmd.Stderr = p.stderr
	cmd.WaitDelay = 5 * time.Second
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.stdin = stdin
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting child %s: %v", name, err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			if s := p.stderr.String(); s != "" {
				t.Logf("stderr of child %s:\n%s", name, s)
			}
		}
	})
	return p
}

// kill kills the child with SIGKILL, if it runs, and waits until it has
// exited.
func (p *proc) kill() {
	select {
	case <-p.exited:
		return
	default:
	}
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
	p.stdin.Close()
}

// send writes a command line to the child's standard input.
func (p *proc) send(t *testing.T, line string) {
	t.Helper()
	if _, err := io.WriteString(p.stdin, line+"\n"); err != nil {
		t.Fatalf("telling child %s %q: %v", p.name, line, err)
	}
}

// expect waits for the child's next line of output that starts with
// prefix, skipping others, and returns it.
func (p *proc) expect(t *testing.T, prefix string, within time.Duration) string {
	t.Helper()
	timeout := time.After(within)
	for {
		select {
		case line := <-p.lines:
			if strings.HasPrefix(line, prefix) {
				return line
			}
		case <-p.exited:
			select {
			case line := <-p.lines:
				if strings.HasPrefix(line, prefix) {
					return line
				}
				continue
			default:
			}
			t.Fatalf("child %s exited (%v) before printing %q\n%s", p.name, p.err, prefix, p.stderr.String())
		case <-timeout:
			t.Fatalf("child %s did not print %q within %v\n%s", p.name, prefix, within, p.stderr.String())
		}
	}
}

// wait waits until the child has exited by itself and fails t unless it
// exited with status 0.
func (p *proc) wait(t *testing.T, within time.Duration) {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(within):
		t.Fatalf("child %s did not exit within %v\n%s", p.name, within, p.stderr.String())
	}
	if p.err != nil {
		t.Fatalf("child %s: %v\n%s", p.name, p.err, p.stderr.String())
	}
}

// running reports an error if the child has exited.
func (p *proc) running() error {
	select {
	case <-p.exited:
		return fmt.Errorf("child %s exited: %v\n%s", p.name, p.err, p.stderr.String())
	default:
		return nil
	}
}

func isKilled(err error) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// lineWriter sends what is written to it to c, a line at a time.
type lineWriter struct {
	mu  sync.Mutex
	buf []byte
	c   chan string
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		line := string(w.buf[:i])
		w.buf = w.buf[i+1:]
		select {
		case w.c <- line:
		default: // nobody reads that much: the tests wait for a few lines only
		}
	}
}

// limitedBuffer collects a child's stderr, safe for concurrent use, keeping
// the first 64 KiB.
type limitedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := 64<<10 - b.buf.Len(); room > 0 {
		b.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (b *limitedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// stdinCommands reads the lines of the standard input, in a child, and
// sends them to the channel it returns; when the input closes (the parent
// closed it or died) the child exits.
func stdinCommands() <-chan string {
	c := make(chan string, 16)
	go func() {
		s := bufio.NewScanner(os.Stdin)
		for s.Scan() {
			c <- s.Text()
		}
		os.Exit(3)
	}()
	return c
}

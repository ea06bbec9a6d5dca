package redislock_test

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockreg/lockreg/internal/testdb"
)

// server is a redis-server of a test's own, a child process on a free
// port without persistence, as the shared one runs: restarting it loses
// every key. It is killed when the test ends.
type server struct {
	t    testing.TB
	port int
	args []string
	dir  string
	cmd  *exec.Cmd
}

// startServer starts redis-server with extra args, or skips t (fails it
// when CI=true) if the binary is missing.
func startServer(t testing.TB, args ...string) *server {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		testdb.Unreachable(t, fmt.Sprintf("redis-server is not installed (Debian package redis-server): %v", err))
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	s := &server{t: t, port: port, args: args, dir: t.TempDir()}
	s.start()
	t.Cleanup(s.kill)
	return s
}

func (s *server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// start runs the server and waits until it answers.
func (s *server) start() {
	s.t.Helper()
	args := append([]string{"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", s.dir, "--logfile", ""}, s.args...)
	s.cmd = exec.Command("redis-server", args...)
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("starting redis-server: %v", err)
	}
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	defer c.Close()
	for deadline := time.Now().Add(30 * time.Second); ; {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("redis-server on port %d did not answer: %v", s.port, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// kill stops the server with SIGKILL, as a crash would.
func (s *server) kill() {
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Kill()
	s.cmd.Wait()
	s.cmd = nil
}

// restart kills the server and starts it again on the same port, empty.
func (s *server) restart() {
	s.t.Helper()
	s.kill()
	s.start()
}

// client returns a client of the server, closed when the test ends.
func (s *server) client(opts ...func(*redis.Options)) *redis.Client {
	o := &redis.Options{Addr: s.Addr()}
	for _, f := range opts {
		f(o)
	}
	c := redis.NewClient(o)
	s.t.Cleanup(func() { c.Close() })
	return c
}

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
)

// ownPostgres is a PostgreSQL server the benchmark starts for itself (flag
// -own-postgres), so that pg_stat_statements can be preloaded without
// restarting a server others use: initdb into a temporary directory, with
// the newest server binaries under /usr/lib/postgresql/*/bin, trust
// authentication, user postgres, 127.0.0.1 only, and
// shared_preload_libraries=pg_stat_statements. As root, initdb and the
// server run as the system user postgres (initdb refuses root).
type ownPostgres struct {
	dir, bin string
	asUser   string // run as this user ("" = as ourselves)
	port     int
}

// startOwnPostgres initialises and starts the server on port and returns
// it with the DSN of its postgres database.
func startOwnPostgres(ctx context.Context, port int) (*ownPostgres, string, error) {
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(bins) == 0 {
		return nil, "", errors.New("-own-postgres: no /usr/lib/postgresql/*/bin/initdb")
	}
	// The newest version: the glob sorts lexically, so compare numbers.
	best, bestV := "", -1
	for _, b := range bins {
		v, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(b))))
		if v > bestV {
			best, bestV = b, v
		}
	}
	p := &ownPostgres{bin: filepath.Dir(best), port: port}
	dir, err := os.MkdirTemp("", "lockreg-bench-pg-")
	if err != nil {
		return nil, "", err
	}
	p.dir = dir
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			p.stop()
			return nil, "", fmt.Errorf("-own-postgres as root needs the system user postgres: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			p.stop()
			return nil, "", err
		}
		p.asUser = "postgres"
	}
	data := filepath.Join(dir, "data")
	if out, err := p.run(ctx, "initdb", "-D", data, "-A", "trust", "-U", "postgres", "--no-sync"); err != nil {
		p.stop()
		return nil, "", fmt.Errorf("-own-postgres: initdb: %w\n%s", err, out)
	}
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c shared_preload_libraries=pg_stat_statements "+
		"-c max_connections=200 -c pg_stat_statements.track=top -c pg_stat_statements.track_planning=on", port, dir)
	if out, err := p.run(ctx, "pg_ctl", "-D", data, "-l", filepath.Join(dir, "log"), "-w", "-o", opts, "start"); err != nil {
		p.stop()
		return nil, "", fmt.Errorf("-own-postgres: pg_ctl start: %w\n%s", err, out)
	}
	return p, fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port), nil
}

func (p *ownPostgres) run(ctx context.Context, prog string, args ...string) ([]byte, error) {
	path := filepath.Join(p.bin, prog)
	var cmd *exec.Cmd
	if p.asUser != "" {
		cmd = exec.CommandContext(ctx, "runuser", append([]string{"-u", p.asUser, "--", path}, args...)...)
	} else {
		cmd = exec.CommandContext(ctx, path, args...)
	}
	cmd.Dir = p.dir
	out, err := cmd.CombinedOutput()
	return out, err
}

// stop stops the server, if it runs, and removes its directory.
func (p *ownPostgres) stop() {
	if p == nil {
		return
	}
	data := filepath.Join(p.dir, "data")
	if _, err := os.Stat(filepath.Join(data, "postmaster.pid")); err == nil {
		if out, err := p.run(context.Background(), "pg_ctl", "-D", data, "-m", "fast", "-w", "stop"); err != nil {
			fmt.Fprintf(os.Stderr, "bench: -own-postgres: pg_ctl stop: %v\n%s", err, strings.TrimSpace(string(out)))
		}
	}
	os.RemoveAll(p.dir)
}

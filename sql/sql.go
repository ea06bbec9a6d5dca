// Package sql embeds lockreg's schema scripts, one folder per SQL dialect:
//
//	postgres/  PostgreSQL 9.6 or later
//	mysql/     MySQL 5.7+/8 and MariaDB 10.3+ (InnoDB)
//	sqlite/    SQLite (DROP COLUMN in a down script needs 3.35)
//
// Each folder holds numbered migrations, NNNNNN_name.up.sql with its
// inverse NNNNNN_name.down.sql, in the layout of golang-migrate, to be
// applied in name order. The first word of the name says whose tables a
// script makes: the lock scripts (000001_lock, 000002_lock_fence_queue,
// 000004_lock_holder, and postgres/000005_lock_queued) are applied by [github.com/lockreg/lockreg/jdbc.CreateSchema], the
// message-group scripts (000003_message_group, postgres/000006_message_group_due and
// postgres/000008_message_group_probe) by
// [github.com/lockreg/lockreg/groupstore/sqlstore.CreateSchema], so the
// scripts are the one definition of the schema; migration tools apply all
// of them, the same files:
//
//	// golang-migrate (source/iofs); on MySQL the DSN needs multiStatements=true
//	src, err := iofs.New(lockregsql.FS, "postgres")
//	// goose, which wants up and down in one file
//	fsys, err := lockregsql.Goose("postgres")
//	provider, err := goose.NewProvider(goose.DialectPostgres, db, fsys)
//
// A script also runs on its own, for example on PostgreSQL with
// "psql -v ON_ERROR_STOP=1 -1 -f 000002_lock_fence_queue.up.sql". Every up
// script starts with the line "-- +goose Up" and every down script with
// "-- +goose Down". Statements end with a semicolon at the end
// of a line and contain no other semicolons. Table and constraint names
// carry Spring Integration's default prefix INT_; CreateSchema applies the
// scripts with another prefix when configured to.
//
// On PostgreSQL and MySQL/MariaDB every statement is idempotent (CREATE
// TABLE IF NOT EXISTS, ADD COLUMN IF NOT EXISTS, and on MySQL an ALTER
// prepared only when the column is missing), so a script may be applied
// again, also to tables that CreateSchema or Spring Integration 7 made.
// SQLite has no ADD or DROP COLUMN IF [NOT] EXISTS: the ALTER TABLE
// statements of sqlite/000002 and sqlite/000004 (ADD FENCE, LOCK_NAME and
// HOLDER, and the DROPs in their down scripts) are the exception;
// CreateSchema skips an ADD when the column exists, and a migration tool
// runs each once.
//
// The up scripts do the work on an empty database or on an existing Spring
// Integration 7 INT_LOCK: INT_LOCK matches Spring Integration 7's lock table
// column for column, 000002 adds lockreg's FENCE column, with a default
// that keeps Spring's statements working, and 000004 the nullable LOCK_NAME
// (the key as written) and HOLDER (who took the lease), which Spring's
// statements leave NULL, so lockreg and Spring applications can share the
// table; on PostgreSQL 000005 adds the nullable QUEUED_UNTIL, the waiter
// queue's has-waiters flag, which Spring's statements leave alone too, and
// 000006 makes the due groups' index partial, so that no plan reads a
// region's groups through it in place of the primary key, and 000008 adds
// INT_GROUP's nullable probe summary, which lets an Add of the resequencer
// tell a twin or a size mismatch from the group's row. INT_LOCK_WAIT (PostgreSQL's waiter queue), INT_GROUP
// and INT_GROUP_MESSAGE are lockreg's own. Migrating down to version 1
// leaves INT_LOCK as Spring 7 creates it; migrating down past 000001 drops it, also when Spring made
// it. A Spring Integration 5.4-6.x INT_LOCK (no EXPIRED_AFTER) is not
// migrated by these scripts: package jdbc shares it as it is with those
// applications (jdbc.LayoutSpring6; jdbc.CreateSchema only adds FENCE), or,
// with jdbc.WithLayout(jdbc.LayoutSpring7), refuses it with the statements
// that migrate it.
package sql

import (
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"strings"
	"time"
)

// FS holds the scripts, under the paths "<dialect>/<NNNNNN>_<name>.up.sql"
// and "<dialect>/<NNNNNN>_<name>.down.sql", where dialect is "postgres",
// "mysql" or "sqlite". Reading it costs no I/O: the files are compiled into
// the binary.
//
//go:embed postgres/*.sql mysql/*.sql sqlite/*.sql
var FS embed.FS

// Goose returns the scripts of dialect ("postgres", "mysql" or "sqlite")
// as goose wants them: one file per migration, "<NNNNNN>_<name>.sql" at the
// root, holding the up script (under "-- +goose Up") followed by the down
// script (under "-- +goose Down"). goose cannot read FS itself, since it
// takes both halves of a migration for two migrations of one version. The
// files are joined in memory on each call, at no I/O cost; an unknown
// dialect is an error wrapping fs.ErrNotExist.
func Goose(dialect string) (fs.FS, error) {
	var ups []string
	if fs.ValidPath(dialect) && !strings.ContainsAny(dialect, "/.*?[\\") {
		ups, _ = fs.Glob(FS, dialect+"/*.up.sql") // the pattern is valid
	}
	if len(ups) == 0 {
		return nil, fmt.Errorf("lockreg sql: no scripts for dialect %q: %w", dialect, fs.ErrNotExist)
	}
	files := make(mapFS, len(ups))
	for _, up := range ups {
		base := strings.TrimSuffix(up, ".up.sql")
		u, err := fs.ReadFile(FS, up)
		if err != nil {
			return nil, err
		}
		d, err := fs.ReadFile(FS, base+".down.sql")
		if err != nil {
			return nil, fmt.Errorf("lockreg sql: %s has no down script: %w", up, err)
		}
		files[path.Base(base)+".sql"] = append(append(u, '\n'), d...)
	}
	return files, nil
}

// mapFS is a flat, read-only file system in memory: file names to
// contents, under the root ".".
type mapFS map[string][]byte

func (m mapFS) Open(name string) (fs.File, error) {
	if name == "." {
		return &mapDir{m: m}, nil
	}
	b, ok := m[name]
	if !ok {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	return &mapFile{info: mapInfo{name: name, size: int64(len(b))}, r: strings.NewReader(string(b))}, nil
}

// ReadDir lists the root in name order, as fs.ReadDirFS promises.
func (m mapFS) ReadDir(name string) ([]fs.DirEntry, error) {
	if name != "." {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: fs.ErrNotExist}
	}
	return (&mapDir{m: m}).ReadDir(-1)
}

type mapInfo struct {
	name string
	size int64
	dir  bool
}

func (i mapInfo) Name() string       { return i.name }
func (i mapInfo) Size() int64        { return i.size }
func (i mapInfo) ModTime() time.Time { return time.Time{} }
func (i mapInfo) IsDir() bool        { return i.dir }
func (i mapInfo) Sys() any           { return nil }
func (i mapInfo) Mode() fs.FileMode {
	if i.dir {
		return fs.ModeDir | 0o555
	}
	return 0o444
}

type mapFile struct {
	info mapInfo
	r    *strings.Reader
}

func (f *mapFile) Stat() (fs.FileInfo, error) { return f.info, nil }
func (f *mapFile) Read(p []byte) (int, error) { return f.r.Read(p) }
func (f *mapFile) Close() error               { return nil }

// mapDir is the open root of a mapFS.
type mapDir struct {
	m    mapFS
	read int // entries already returned by ReadDir
}

func (d *mapDir) Stat() (fs.FileInfo, error) { return mapInfo{name: ".", dir: true}, nil }
func (d *mapDir) Read([]byte) (int, error) {
	return 0, &fs.PathError{Op: "read", Path: ".", Err: errors.New("is a directory")}
}
func (d *mapDir) Close() error { return nil }

func (d *mapDir) ReadDir(n int) ([]fs.DirEntry, error) {
	names := make([]string, 0, len(d.m))
	for name := range d.m {
		names = append(names, name)
	}
	slices.Sort(names)
	names = names[d.read:]
	if n > 0 && len(names) > n {
		names = names[:n]
	}
	if n > 0 && len(names) == 0 {
		return nil, io.EOF
	}
	d.read += len(names)
	entries := make([]fs.DirEntry, len(names))
	for i, name := range names {
		entries[i] = fs.FileInfoToDirEntry(mapInfo{name: name, size: int64(len(d.m[name]))})
	}
	return entries, nil
}

package main

// The schema commands: apply and status.

import (
	"context"
	"errors"
	"io"

	"github.com/lockreg/lockreg/groupstore/sqlstore"
	"github.com/lockreg/lockreg/jdbc"
)

func schemaApply(ctx context.Context, args []string, out io.Writer) error {
	c := newCommand("schema apply", out)
	if _, err := c.parse(args, 0, ""); err != nil {
		return err
	}
	defer c.close()
	// sqlstore's CreateSchema applies jdbc's lock scripts first.
	if err := sqlstore.CreateSchema(ctx, c.db, c.storeConfig()); err != nil {
		return err
	}
	return c.message("schema applied: the lock and group tables with prefix "+c.prefix,
		map[string]any{"applied": true})
}

// tableStatus is one line of schema status.
type tableStatus struct {
	Tables string `json:"tables"`
	OK     bool   `json:"ok"`
	Error  string `json:"error,omitempty"`
}

func schemaStatus(ctx context.Context, args []string, out io.Writer) error {
	c := newCommand("schema status", out)
	if _, err := c.parse(args, 0, ""); err != nil {
		return err
	}
	defer c.close()
	var status []tableStatus
	check := func(tables string, err error) {
		s := tableStatus{Tables: tables, OK: err == nil}
		if err != nil {
			s.Error = err.Error()
		}
		status = append(status, s)
	}
	repo, err := jdbc.NewLockRepository(ctx, c.db, c.lockOptions()...)
	if err == nil {
		err = repo.Check(ctx)
		repo.Close(ctx)
	}
	check(c.prefix+"LOCK", err)
	s, err := c.store()
	if err == nil {
		_, err = s.Groups(ctx, sqlstore.GroupFilter{Limit: 1})
		s.Close(ctx)
	}
	check(c.prefix+"GROUP, "+c.prefix+"GROUP_MESSAGE", err)
	var rows [][]string
	failed := false
	for _, s := range status {
		state := "ok"
		if !s.OK {
			state, failed = s.Error, true
		}
		rows = append(rows, []string{s.Tables, state})
	}
	if err := c.print(status, []string{"TABLES", "STATUS"}, rows); err != nil {
		return err
	}
	if failed {
		return errors.New("schema status: not every table is usable; \"lockreg schema apply\" creates or completes them")
	}
	return nil
}

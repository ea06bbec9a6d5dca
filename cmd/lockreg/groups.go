package main

// The message-group commands: list, show, expire and delete.

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/lockreg/lockreg/groupstore/sqlstore"
)

// group is a message group as the CLI prints it in JSON.
type group struct {
	Key          string     `json:"key"`
	ID           string     `json:"id"`
	Complete     bool       `json:"complete"`
	Size         int        `json:"size"`
	Releases     int64      `json:"releases"`
	Version      int64      `json:"version"`
	Created      time.Time  `json:"created"`
	Updated      time.Time  `json:"updated"`
	Due          *time.Time `json:"due,omitempty"`
	ClaimedUntil *time.Time `json:"claimed_until,omitempty"`
	Messages     []message  `json:"messages,omitempty"`
}

type message struct {
	UUID        string    `json:"uuid"`
	Position    int64     `json:"position"`
	Released    bool      `json:"released"`
	PayloadSize int64     `json:"payload_size"`
	Created     time.Time `json:"created"`
}

func groupOf(g sqlstore.GroupInfo) group {
	out := group{Key: g.Key, ID: g.ID, Complete: g.Complete, Size: g.Size, Releases: g.Releases, Version: g.Version,
		Created: g.Created, Updated: g.Updated}
	if !g.Due.IsZero() {
		out.Due = &g.Due
	}
	if !g.ClaimedUntil.IsZero() {
		out.ClaimedUntil = &g.ClaimedUntil
	}
	return out
}

var groupHeader = []string{"KEY", "STATE", "SIZE", "CREATED", "DUE", "VERSION"}

func (g group) row() []string {
	state, due := "open", ""
	if g.Complete {
		state = "complete"
	}
	if g.Due != nil {
		due = g.Due.Format(time.RFC3339)
	}
	return []string{g.Key, state, fmt.Sprint(g.Size), g.Created.Format(time.RFC3339), due, fmt.Sprint(g.Version)}
}

func groupsList(ctx context.Context, args []string, out io.Writer) error {
	c := newCommand("groups list", out)
	state := c.fs.String("state", "", "")
	olderThan := c.fs.Duration("older-than", 0, "")
	limit := c.fs.Int("limit", 0, "")
	if _, err := c.parse(args, 0, ""); err != nil {
		return err
	}
	defer c.close()
	f := sqlstore.GroupFilter{OlderThan: *olderThan, Limit: *limit}
	switch *state {
	case "":
	case "open":
		f.State = sqlstore.OpenGroups
	case "complete":
		f.State = sqlstore.CompleteGroups
	case "due":
		f.State = sqlstore.DueGroups
	default:
		return fmt.Errorf("%w: groups list: -state %q: want open, complete or due", errUsage, *state)
	}
	s, err := c.store()
	if err != nil {
		return err
	}
	defer s.Close(ctx)
	gs, err := s.Groups(ctx, f)
	if err != nil {
		return err
	}
	list := make([]group, 0, len(gs))
	var rows [][]string
	for _, g := range gs {
		list = append(list, groupOf(g))
		rows = append(rows, groupOf(g).row())
	}
	return c.print(list, groupHeader, rows)
}

func groupsShow(ctx context.Context, args []string, out io.Writer) error {
	c := newCommand("groups show", out)
	rest, err := c.parse(args, 1, "one KEY")
	if err != nil {
		return err
	}
	defer c.close()
	s, err := c.store()
	if err != nil {
		return err
	}
	defer s.Close(ctx)
	g, msgs, err := s.Inspect(ctx, rest[0])
	if err != nil {
		return err
	}
	out2 := groupOf(g)
	rows := [][]string{}
	for _, m := range msgs {
		out2.Messages = append(out2.Messages, message(m))
		state := "held"
		if m.Released {
			state = "released"
		}
		rows = append(rows, []string{fmt.Sprint(m.Position), m.UUID, state, fmt.Sprint(m.PayloadSize), m.Created.Format(time.RFC3339Nano)})
	}
	if c.json {
		return c.print(out2, nil, nil)
	}
	if err := c.print(nil, groupHeader, [][]string{out2.row()}); err != nil {
		return err
	}
	fmt.Fprintln(c.out)
	return c.print(nil, []string{"POSITION", "MESSAGE", "STATE", "PAYLOAD BYTES", "ADDED"}, rows)
}

func groupsExpire(ctx context.Context, args []string, out io.Writer) error {
	c := newCommand("groups expire", out)
	rest, err := c.parse(args, 1, "one KEY")
	if err != nil {
		return err
	}
	defer c.close()
	s, err := c.store()
	if err != nil {
		return err
	}
	defer s.Close(ctx)
	if err := s.Expire(ctx, rest[0]); err != nil {
		return err
	}
	return c.message(fmt.Sprintf("group %q is due: the next pass of a handler's timeout runner expires it", rest[0]),
		map[string]any{"expired": true})
}

func groupsDelete(ctx context.Context, args []string, out io.Writer) error {
	c := newCommand("groups delete", out)
	force := c.fs.Bool("force", false, "")
	rest, err := c.parse(args, 1, "one KEY")
	if err != nil {
		return err
	}
	defer c.close()
	if !*force {
		return fmt.Errorf("%w: groups delete drops the group's messages unreleased: add -force to do it", errUsage)
	}
	s, err := c.store()
	if err != nil {
		return err
	}
	defer s.Close(ctx)
	if err := s.Remove(ctx, rest[0], 0); err != nil {
		return err
	}
	return c.message(fmt.Sprintf("deleted group %q", rest[0]), map[string]any{"deleted": true})
}

package main

// The lock commands: list, show, release and the PostgreSQL waiters.

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/lockreg/lockreg/jdbc"
)

func (c *command) admin() (*jdbc.Admin, error) {
	return jdbc.NewAdmin(c.db, jdbc.WithDialect(c.dialect), jdbc.WithPrefix(c.prefix))
}

// lease is a lease as the CLI prints it in JSON.
type lease struct {
	Region   string    `json:"region"`
	Key      string    `json:"key"`
	LockKey  string    `json:"lock_key"`
	ClientID string    `json:"client_id"`
	Holder   string    `json:"holder"`
	Held     bool      `json:"held"`
	Created  time.Time `json:"created"`
	Expires  time.Time `json:"expires"`
	Token    int64     `json:"token"`
}

func leaseOf(l jdbc.LeaseInfo) lease {
	return lease{Region: l.Region, Key: l.Name, LockKey: l.LockKey, ClientID: l.ClientID, Holder: l.Holder, Held: l.Held,
		Created: l.Created, Expires: l.Expires, Token: l.Token}
}

var leaseHeader = []string{"REGION", "KEY", "STATE", "HOLDER", "CLIENT", "SINCE", "EXPIRES", "TOKEN"}

func (l lease) row() []string {
	state, key := "expired", l.Key
	if l.Held {
		state = "held"
	}
	if key == "" {
		key = "(" + l.LockKey + ")" // a row Spring wrote
	}
	return []string{l.Region, key, state, l.Holder, l.ClientID, l.Created.Format(time.RFC3339), l.Expires.Format(time.RFC3339Nano),
		fmt.Sprint(l.Token)}
}

func locksList(ctx context.Context, args []string, out io.Writer) error {
	c := newCommand("locks list", out)
	held := c.fs.Bool("held", false, "")
	expired := c.fs.Bool("expired", false, "")
	allRegions := c.fs.Bool("all-regions", false, "")
	namePrefix := c.fs.String("name-prefix", "", "")
	limit := c.fs.Int("limit", 0, "")
	if _, err := c.parse(args, 0, ""); err != nil {
		return err
	}
	defer c.close()
	if *held && *expired {
		return fmt.Errorf("%w: locks list: -held and -expired exclude each other", errUsage)
	}
	f := jdbc.LeaseFilter{Region: c.region, NamePrefix: *namePrefix, Limit: *limit}
	if *allRegions {
		f.Region = ""
	}
	if *held {
		f.State = jdbc.HeldLeases
	} else if *expired {
		f.State = jdbc.ExpiredLeases
	}
	a, err := c.admin()
	if err != nil {
		return err
	}
	ls, err := a.Leases(ctx, f)
	if err != nil {
		return err
	}
	list := make([]lease, 0, len(ls))
	var rows [][]string
	for _, l := range ls {
		list = append(list, leaseOf(l))
		rows = append(rows, leaseOf(l).row())
	}
	return c.print(list, leaseHeader, rows)
}

func locksShow(ctx context.Context, args []string, out io.Writer) error {
	c := newCommand("locks show", out)
	rest, err := c.parse(args, 1, "one KEY")
	if err != nil {
		return err
	}
	defer c.close()
	a, err := c.admin()
	if err != nil {
		return err
	}
	l, ok, err := a.Lease(ctx, c.region, rest[0])
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("no lock row for key %q in region %s", rest[0], c.region)
	}
	return c.print(leaseOf(l), leaseHeader, [][]string{leaseOf(l).row()})
}

func locksRelease(ctx context.Context, args []string, out io.Writer) error {
	c := newCommand("locks release", out)
	force := c.fs.Bool("force", false, "")
	rest, err := c.parse(args, 1, "one KEY")
	if err != nil {
		return err
	}
	defer c.close()
	if !*force {
		return fmt.Errorf("%w: locks release ends a lease its holder still relies on; "+
			"only the fencing token then protects the guarded data: add -force to do it", errUsage)
	}
	a, err := c.admin()
	if err != nil {
		return err
	}
	released, err := a.ForceRelease(ctx, c.region, rest[0])
	if err != nil {
		return err
	}
	if !released {
		return fmt.Errorf("no held lease on key %q in region %s", rest[0], c.region)
	}
	return c.message(fmt.Sprintf("released %q in region %s", rest[0], c.region), map[string]any{"released": true})
}

func locksWaiters(ctx context.Context, args []string, out io.Writer) error {
	c := newCommand("locks waiters", out)
	allRegions := c.fs.Bool("all-regions", false, "")
	if _, err := c.parse(args, 0, ""); err != nil {
		return err
	}
	defer c.close()
	a, err := c.admin()
	if err != nil {
		return err
	}
	region := c.region
	if *allRegions {
		region = ""
	}
	ws, err := a.Waiters(ctx, region)
	if err != nil {
		return err
	}
	type waiter struct {
		Region   string    `json:"region"`
		Key      string    `json:"key"`
		LockKey  string    `json:"lock_key"`
		ClientID string    `json:"client_id"`
		Holder   string    `json:"holder"`
		Since    time.Time `json:"since"`
		Until    time.Time `json:"until"`
	}
	list := make([]waiter, 0, len(ws))
	var rows [][]string
	for _, w := range ws {
		list = append(list, waiter{Region: w.Region, Key: w.Name, LockKey: w.LockKey, ClientID: w.ClientID, Holder: w.Holder, Since: w.Since, Until: w.Until})
		rows = append(rows, []string{w.Region, w.Name, w.Holder, w.ClientID, w.Since.Format(time.RFC3339Nano)})
	}
	return c.print(list, []string{"REGION", "KEY", "WAITER", "CLIENT", "SINCE"}, rows)
}

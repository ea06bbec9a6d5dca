// Package gocronleader adapts a [leader.Candidate] to go-co-op/gocron v2's
// distributed elector, so that of the schedulers of several instances only
// the leader's runs jobs:
//
//	c, err := leader.New(locks, "scheduler")
//	...
//	s, err := gocron.NewScheduler(gocron.WithDistributedElector(gocronleader.New(c)))
//
// gocron asks the elector each time a job is due and skips the run (a
// Skip in its monitor) when it reports an error. The answer costs no I/O:
// it is the candidate's [leader.Candidate.IsLeader]. A run that has
// started goes on when the leadership ends meanwhile; a job that must stop
// with the leadership takes the term ([leader.Candidate.Term]) and watches
// its Context, and guards its writes with the term's Token.
package gocronleader

import (
	"context"
	"fmt"

	"github.com/go-co-op/gocron/v2"

	"github.com/lockreg/lockreg/leader"
)

// New returns a gocron.Elector whose IsLeader returns nil while c leads
// and an error wrapping [leader.ErrNotLeader] otherwise.
func New(c *leader.Candidate) gocron.Elector { return elector{c} }

type elector struct{ c *leader.Candidate }

func (e elector) IsLeader(context.Context) error {
	if e.c.IsLeader() {
		return nil
	}
	return fmt.Errorf("gocronleader: %q: %w", e.c.Role(), leader.ErrNotLeader)
}

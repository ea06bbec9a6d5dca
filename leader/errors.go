package leader

import "errors"

var (
	// ErrNotLeader reports that the candidate does not lead its role: from
	// [Candidate.Yield] and from the gocron elector of package gocronleader.
	ErrNotLeader = errors.New("leader: not the leader")

	// ErrClosed reports use of a closed [Candidate]. It is also the cause
	// (context.Cause) of the context of a term that Close ended.
	ErrClosed = errors.New("leader: candidate closed")

	// ErrYielded is the cause (context.Cause) of the context of a term that
	// ended because it was yielded.
	ErrYielded = errors.New("leader: leadership yielded")

	// ErrInvalidOption reports an invalid argument to [New]: a nil
	// registry, an empty role or an option with an invalid value. The
	// returned error names it.
	ErrInvalidOption = errors.New("leader: invalid option")
)

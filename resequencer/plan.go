package resequencer

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"

	"github.com/lockreg/lockreg/groupstore"
)

// sequence reads the sequence number and size (0 for none) from md, or
// says what is wrong with them.
func (r rules) sequence(md map[string]string) (seq, size int64, problem string) {
	rawSize, hasSize := md[r.sizeKey]
	if hasSize {
		n, err := strconv.ParseInt(rawSize, 10, 64)
		switch {
		case err != nil:
			return 0, 0, fmt.Sprintf("%s %q is not a number", r.sizeKey, rawSize)
		case n < 1:
			return 0, 0, fmt.Sprintf("%s %d is below 1", r.sizeKey, n)
		}
		size = n
	} else if !r.partial {
		return 0, 0, fmt.Sprintf("%s is missing", r.sizeKey)
	}
	raw, ok := md[r.numberKey]
	if !ok {
		return 0, 0, fmt.Sprintf("%s is missing", r.numberKey)
	}
	n, err := strconv.ParseInt(raw, 10, 64)
	switch {
	case err != nil:
		return 0, 0, fmt.Sprintf("%s %q is not a number", r.numberKey, raw)
	case n < 1:
		return 0, 0, fmt.Sprintf("%s %d is below 1", r.numberKey, n)
	case size > 0 && n > size:
		return 0, 0, fmt.Sprintf("%s %d is beyond %s %d", r.numberKey, n, r.sizeKey, size)
	}
	return n, size, ""
}

// entry is a stored message with its sequence.
type entry struct {
	msg       groupstore.Message
	seq, size int64
}

// discarded is a stored message to discard, with the reason.
type discarded struct {
	msg    groupstore.Message
	reason string
}

// plan is what to do with a group's unreleased messages.
type plan struct {
	release  []entry // to publish, in sequence order
	discard  []discarded
	last     int64 // the last released sequence number afterwards
	complete bool  // the whole sequence has been released
}

// changes reports whether the plan publishes or discards anything.
func (p plan) changes() bool { return len(p.release) > 0 || len(p.discard) > 0 }

// ids returns the message UUIDs the plan takes out of the group.
func (p plan) ids() []string {
	ids := make([]string, 0, len(p.release)+len(p.discard))
	for _, e := range p.release {
		ids = append(ids, e.msg.UUID)
	}
	for _, d := range p.discard {
		ids = append(ids, d.msg.UUID)
	}
	return ids
}

// planFor decides for sg (with its messages): messages at or below the last
// released number are late, a second message with a number already held is
// a duplicate (the first arrival stays), a size other than that of the
// earliest valid message is invalid. Of the rest, on expiry everything is
// released (skipping gaps) or discarded; otherwise the run that follows the
// last released number is released when partial releases are on, and the
// whole sequence once it is all there when they are off.
func (r rules) planFor(sg groupstore.Group, expired bool) plan {
	p := plan{last: sg.LastReleasedSequence}
	var (
		valid     []entry
		seen      = map[int64]bool{}
		groupSize = int64(-1)
	)
	for _, m := range sg.Messages {
		seq, size, problem := r.sequence(m.Metadata)
		switch {
		case problem != "":
			p.discard = append(p.discard, discarded{m, reasonInvalid + problem})
		case seq <= p.last:
			p.discard = append(p.discard, discarded{m, reasonLate})
		case groupSize >= 0 && size != groupSize:
			p.discard = append(p.discard, discarded{m, fmt.Sprintf("%s%s %d differs from the group's %d",
				reasonInvalid, r.sizeKey, size, groupSize)})
		case seen[seq]:
			p.discard = append(p.discard, discarded{m, reasonDuplicate})
		default:
			groupSize = size
			seen[seq] = true
			valid = append(valid, entry{m, seq, size})
		}
	}
	slices.SortFunc(valid, func(a, b entry) int { return cmp.Compare(a.seq, b.seq) })
	switch {
	case expired && r.partialOnExpiry:
		p.release = valid
	case expired:
		for _, e := range valid {
			p.discard = append(p.discard, discarded{e.msg, reasonExpired})
		}
		return p
	case r.partial:
		for _, e := range valid {
			if e.seq != p.last+int64(len(p.release))+1 {
				break
			}
			p.release = append(p.release, e)
		}
	default:
		// Numbers are distinct, above last and at most the size: all of
		// last+1..size are there when there are size-last of them.
		if groupSize > 0 && int64(len(valid)) == groupSize-p.last {
			p.release = valid
		}
	}
	if n := len(p.release); n > 0 {
		p.last = p.release[n-1].seq
		p.complete = p.release[n-1].size > 0 && p.last == p.release[n-1].size
	}
	return p
}

// after returns sg as it is once p is carried out, without its messages:
// what Config.GroupTimeoutFunc sees.
func (p plan) after(sg groupstore.Group) groupstore.Group {
	sg.Messages = nil
	sg.Size -= len(p.release) + len(p.discard)
	sg.LastReleasedSequence = p.last
	return sg
}

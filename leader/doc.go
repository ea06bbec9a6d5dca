// Package leader elects one leader per role among the instances of a
// service, on any [registry.LockRegistry]: Spring Integration's
// LockRegistryLeaderInitiator for Go.
//
// Every instance makes a [Candidate] for the role; the candidate that holds
// the lease of the role's lock leads, keeps the lease by renewing it, and
// gives it up when it finds the lease lost, when it is asked to yield and
// when it is closed; the others wait for the lease and take it then:
//
//	locks, err := registry.New(repo) // one repository (client) per instance
//	...
//	c, err := leader.New(locks, "billing-scheduler",
//		leader.OnGranted(func(t *leader.Term) { go runBilling(t.Context(), t.Token()) }))
//	...
//	defer c.Close(ctx)
//
// or, without callbacks:
//
//	t, err := c.Wait(ctx) // blocks until this instance leads
//	runBilling(t.Context(), t.Token())
//
// # Terms
//
// Each period of leadership is a [Term]. Its context lives as long as the
// leadership: it is cancelled when the lease's Done channel closes (a lost
// lease, or a renewal that did not succeed by a fifth of the TTL before
// the lease could expire), on yield and on close, and always before the
// lease is released, so that the next leader is granted only after the
// term's context is done. [Candidate.IsLeader] is false from the moment
// the lease's Done closes. The term's fencing token ([Term.Token]) is
// greater than that of every earlier term of the role: a leader that
// stalled past its lease, whose context was cancelled too late to stop a
// write already under way, is refused by storage that checks it.
//
// # Faults
//
// The candidate renews the lease at once when it is granted and then every
// third of the TTL. A transient repository error is retried by the
// registry, and other errors by the candidate, until the lease's Done
// closes; only then does the term end. An instance that dies or is cut off
// from the database loses the leadership when its lease expires by the
// database's clock (with package jdbc), a TTL after its last renewal; a
// waiting candidate takes it within its registry's idle interval after
// that. A lease released on yield or close is taken at once where the
// repository announces releases (jdbc on PostgreSQL with a listener), and
// within the idle interval elsewhere.
//
// # Compared with Spring
//
// Spring's initiator got stuck, or flapped the leadership, on transient
// database errors until they were retried (INT-4178, #2467); here a
// transient error while leading never ends the term: only the lease's
// Done channel closing does. What this package adds: the term's context,
// cancelled before the lease can expire, and the term's fencing token.
//
// Package gocronleader adapts a candidate to go-co-op/gocron v2's
// distributed elector.
package leader

package dialect

import "strings"

// The parameters of the lock statements. Custom queries may use the first
// eight.
const (
	LockKey  = "lock_key"  // the mapped key (LOCK_KEY)
	Region   = "region"    // the repository's region
	ClientID = "client_id" // the repository's client id
	TTL      = "ttl"       // the lease length in microseconds
	Wait     = "wait"      // how long a place in the queue lasts, in microseconds
	Channel  = "channel"   // the PostgreSQL notification channel of the table and region
	LockName = "lock_name" // the caller's key, as readable text (LOCK_NAME); "" in Renew and Release
	Holder   = "holder"    // the repository's holder description (HOLDER)

	Retention = "retention" // the clean-up's: how long a dead row is kept, in microseconds
	Batch     = "batch"     // the clean-up's: the most rows a statement deletes
)

// CustomParams are the parameters a custom lock query may use.
var CustomParams = []string{LockKey, Region, ClientID, TTL, Wait, Channel, LockName, Holder}

// LockSQL are a dialect's statements of the lock table.
//
// Acquire also issues the fencing token, in the same statement: the
// database's clock in microseconds since 1970, or the row's last token plus
// one if that is greater. Tokens of a key therefore increase while its row
// exists, and after the row is deleted they restart from the clock, above
// every earlier token as long as the database's clock does not step back by
// more than the time since the earlier acquisition.
type LockSQL struct {
	// Acquire takes the lease on :lock_key for :ttl if it is free, expired
	// or this client's. With TokenRow it returns the token as its one row
	// (RETURNING); otherwise it sets LAST_INSERT_ID to the token, or to 0
	// when it left the row alone.
	Acquire  string
	TokenRow bool
	// Take is Acquire for a row that exists: an UPDATE on Acquire's
	// conditions that returns the token, cheaper to run than the upsert.
	// It affects no row when the row is missing, held by another client,
	// or written by a transaction its snapshot does not show yet (a
	// release in flight, which Acquire would wait for): Acquire decides
	// then. "" where the dialect has none (all but PostgreSQL).
	Take string
	// TakeBatch is Take for the keys of :rows, a JSON array of objects
	// {"n": index, "k": LOCK_KEY, "ttl": microseconds, "name": LOCK_NAME}, returning the n
	// and token of each key it took. It waits for no row lock: a row
	// another transaction is writing it leaves, as it leaves the rows it
	// does not take, to the statements of one key, so that batches, which
	// lock several rows, never wait in a cycle. "" where Take is.
	TakeBatch string
	// ExpireBatch is QueueSQL.Expire for the keys of :rows, a JSON array
	// of objects {"n": index, "k": LOCK_KEY}, returning the n of each key
	// it expired; like TakeBatch it skips rows locked by others. "" where
	// the dialect has none.
	ExpireBatch string
	// Renew extends this client's unexpired lease to :ttl from now.
	Renew string
	// ReleaseAfter ends this client's lease so that it lasts until :ttl
	// after its acquisition (the row's FENCE) but no longer than :ttl
	// from now, and hands the row to nobody (CLIENT_ID NULL).
	ReleaseAfter string
	// Sweep deletes at most :batch dead rows of the region (DeadLock).
	// With SweepKeys it is instead a SELECT of their keys, and SweepKeys
	// deletes those named in its {list}.
	Sweep, SweepKeys string
	// Queue are the statements of the waiter queue; nil where the dialect
	// has no notifications (all but PostgreSQL).
	Queue *QueueSQL
}

// QueueSQL are the statements of PostgreSQL's waiter queue, the table
// prefix + "LOCK_WAIT": acquisitions take a free lease only when no live
// waiter of another client began to wait earlier.
type QueueSQL struct {
	// AcquireOrWait is Acquire that also leaves the queue when it takes
	// the lease, or joins it (keeps its place) for :wait when it does not.
	// It returns one row either way: the row's token (the new lease's, or
	// the one it found) and 1 when it took the lease, 0 when it queued.
	AcquireOrWait string
	// Release hands the lease to the first live waiter, if any, tells it
	// by a notification on :channel, and returns the count of rows it
	// released. It lowers the has-waiters flag to the last place of the
	// waiters left, and wakes all of the key's waiters (a notification of
	// the key alone) when one queued after its snapshot and it served
	// nobody. A hand-off's notification is "LOCK_KEY CLIENT_ID", chr(31),
	// the new token, chr(31) and the lease's microseconds, which run from
	// after the row lock was taken (clock_timestamp), so from after every
	// statement that wrote the row before.
	Release string
	// Expire is Release for a key nobody waits for: it expires this
	// client's row in place and affects it only while the row's
	// has-waiters flag (FlagColumn) is not live, reading no queue;
	// otherwise, and when the row is not this client's, it affects no row
	// and Release decides.
	Expire string
	// Handed reads a lease handed to this client: its token and the
	// microseconds left.
	Handed string
	// Leave leaves the queue and gives back a lease handed over meanwhile,
	// also by a release in flight: it writes the lock row before the queue
	// row, as Release and AcquireOrWait do.
	Leave string
	// Sweep deletes at most :batch lapsed places of the region.
	Sweep string
	// FlagColumn is the lock table's has-waiters flag (QUEUED_UNTIL on
	// PostgreSQL, script 000005): AcquireOrWait raises it to its place's
	// deadline whenever it does not take the lease, so that the others
	// read the queue only while it lies in the future.
	FlagColumn string
	// Script names the script that adds FlagColumn, for error messages.
	FlagScript string
}

// The lock statements common to all dialects. Release expires the row in
// place rather than deleting it, so that the row keeps its fencing token
// for the next holder; Spring's statements treat it as any expired row.
const (
	Release = `UPDATE {prefix}LOCK SET EXPIRED_AFTER = {past} ` +
		`WHERE REGION = :region AND LOCK_KEY = :lock_key AND CLIENT_ID = :client_id`
	// ExpireMine and SelectMine serve Close.
	ExpireMine = `UPDATE {prefix}LOCK SET EXPIRED_AFTER = {past} ` +
		`WHERE REGION = :region AND CLIENT_ID = :client_id AND EXPIRED_AFTER >= {now}`
	SelectMine = `SELECT LOCK_KEY FROM {prefix}LOCK WHERE REGION = :region AND CLIENT_ID = :client_id AND EXPIRED_AFTER >= {now}`
	// CheckLock reads no rows but fails unless the table, all of Spring 7's
	// columns and lockreg's (FENCE, LOCK_NAME, HOLDER) exist; see
	// Dialect.CheckLock for a dialect's own columns.
	CheckLock = `SELECT LOCK_KEY, REGION, CLIENT_ID, CREATED_DATE, EXPIRED_AFTER, FENCE, LOCK_NAME, HOLDER FROM {prefix}LOCK WHERE 1 = 0`
)

// LockregColumns are the columns lockreg adds to Spring Integration 7's
// INT_LOCK in every dialect: the fencing token (script 000002) and the
// readable key and holder (000004).
var LockregColumns = []string{"FENCE", "LOCK_NAME", "HOLDER"}

// LockColumns returns the columns lockreg adds to Spring Integration 7's
// INT_LOCK in d: LockregColumns and, with a waiter queue, its flag column.
func (d *Dialect) LockColumns() []string {
	if d.Lock.Queue == nil || d.Lock.Queue.FlagColumn == "" {
		return LockregColumns
	}
	return append(append([]string(nil), LockregColumns...), d.Lock.Queue.FlagColumn)
}

// CheckLock returns CheckLock with d's own columns (LockColumns): it reads
// no rows but fails unless all of them exist.
func (d *Dialect) CheckLock() string {
	if d.Lock.Queue == nil || d.Lock.Queue.FlagColumn == "" {
		return CheckLock
	}
	return `SELECT LOCK_KEY, REGION, CLIENT_ID, CREATED_DATE, EXPIRED_AFTER, ` + strings.Join(d.LockColumns(), ", ") +
		` FROM {prefix}LOCK WHERE 1 = 0`
}

// DeadLock is the clean-up's condition for a row of the lock table that
// nothing needs: its lease expired more than the retention ago, and its
// token is more than the retention behind the clock, so that the token the
// next acquisition takes from the clock is greater unless the clock steps
// back by more than the retention meanwhile. The second half keeps a row
// whose token ran ahead of the clock (after the clock stepped back) until
// the clock has passed it.
const DeadLock = `REGION = :region AND EXPIRED_AFTER < {now-:retention} AND FENCE < {clock} - :retention`

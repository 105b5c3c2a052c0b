package namespace

import (
	"errors"

	"github.com/dnnfs/dnnfs/cluster/ids"
)

// The sentinel errors, each with when it is returned. Every error a method
// returns wraps one of them or is the caller's own context.Canceled.
var (
	// ErrInvalid is returned for a malformed argument or configuration
	// (node id, path, file id, endpoint URL) or a record in etcd that does
	// not decode. It is ids.ErrInvalid, which the ids' own checks return.
	ErrInvalid = ids.ErrInvalid
	// ErrUnavailable is returned when etcd did not answer in time (every
	// endpoint down, no quorum, no leader) or refused the connection; the
	// message names the endpoints. Nothing was changed by the failed call.
	ErrUnavailable = errors.New("namespace: etcd unavailable")
	// ErrDuplicateNode is returned by Open when nodes/<node> is held by
	// another live lease: another daemon runs with this --node-id (or one
	// that was killed and whose lease has not expired yet).
	ErrDuplicateNode = errors.New("namespace: node id already registered")
	// ErrNotFound is returned when there is no such name, file record or
	// fsid.
	ErrNotFound = errors.New("namespace: not found")
	// ErrExists is returned by Commit when a new file's path (base 0)
	// names another file.
	ErrExists = errors.New("namespace: already exists")
	// ErrIsDir is returned when the path is a directory (implied by names
	// under it), not a file.
	ErrIsDir = errors.New("namespace: is a directory")
	// ErrNotDir is returned when a parent directory of the path is a file.
	ErrNotDir = errors.New("namespace: a parent is not a directory")
	// ErrNotEmpty is returned by Rename for a directory renamed onto a
	// directory (which, implied by the names below it, is never empty).
	ErrNotEmpty = errors.New("namespace: directory not empty")
	// ErrTooLarge is returned by Rename when a directory rename needs more
	// operations than one etcd transaction may hold (Config.MaxTxnOps,
	// etcd's --max-txn-ops).
	ErrTooLarge = errors.New("namespace: too many names for one transaction")
	// ErrConflict is returned when a commit (or rename, remove, SetMeta)
	// raced with another node's transaction on the same file or name: the
	// record is no longer the one the caller read. Nothing of the call is
	// visible.
	ErrConflict = errors.New("namespace: commit conflict")
	// ErrWriterHeld is returned by AcquireWriter, Commit and SetMeta when
	// another node (or, for AcquireWriter, this one) holds the file's
	// writer lock (writers/<id>). The cluster glue turns it into
	// cluster.ErrWriterBusy, the refusal of the operation.
	ErrWriterHeld = errors.New("namespace: the writer lock is held by a node")
	// ErrWriterLost is returned by Commit when this node held the file's
	// writer lock but its lease ended (etcd unreachable for longer than
	// the lease TTL), so another node may have taken it; the commit was
	// refused.
	ErrWriterLost = errors.New("namespace: writer lock lost")
	// ErrClosed is returned, after Close, by the calls that need the
	// node lease (Commit, AcquireWriter, ...).
	ErrClosed = errors.New("namespace: closed")
)

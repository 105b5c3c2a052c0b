package namespace

import "errors"

// The sentinel errors, each with when it happens. Every error a method
// returns wraps one of them or is the caller's own context.Canceled.
var (
	// ErrInvalid: a malformed argument or configuration (node id, path,
	// file id, endpoint URL) or a record in etcd that does not decode.
	ErrInvalid = errors.New("invalid")
	// ErrUnavailable: etcd did not answer in time (every endpoint down,
	// no quorum, no leader) or refused the connection; the message names
	// the endpoints. Nothing was changed by the failed call.
	ErrUnavailable = errors.New("etcd unavailable")
	// ErrDuplicateNode: Open found nodes/<node> held by another live
	// lease: another daemon runs with this --node-id (or one that was
	// killed and whose lease has not expired yet).
	ErrDuplicateNode = errors.New("node id already registered")
	// ErrNotFound: no such name, file record or fsid.
	ErrNotFound = errors.New("not found")
	// ErrExists: a new file's path (Commit with base 0) names another
	// file.
	ErrExists = errors.New("already exists")
	// ErrIsDir: the path is a directory (implied by names under it), not
	// a file.
	ErrIsDir = errors.New("is a directory")
	// ErrNotDir: a parent directory of the path is a file.
	ErrNotDir = errors.New("a parent is not a directory")
	// ErrNotEmpty: a directory renamed onto a directory (which, implied
	// by the names below it, is never empty).
	ErrNotEmpty = errors.New("directory not empty")
	// ErrTooLarge: a directory rename needs more operations than one etcd
	// transaction may hold (Config.MaxTxnOps, etcd's --max-txn-ops).
	ErrTooLarge = errors.New("too many names for one transaction")
	// ErrConflict: a commit (or rename, remove) raced with another node's
	// transaction on the same file or name: the record is no longer the
	// one the caller read. Nothing of the call is visible.
	ErrConflict = errors.New("commit conflict")
	// ErrWriterBusy: another node (or this one) holds the file's writer
	// lock (writers/<id>).
	ErrWriterBusy = errors.New("file is open for writing on a node")
	// ErrWriterLost: this node held the file's writer lock but its lease
	// ended (etcd unreachable for longer than the lease TTL), so another
	// node may have taken it; the commit was refused.
	ErrWriterLost = errors.New("writer lock lost")
	// ErrClosed: the NS was closed.
	ErrClosed = errors.New("namespace closed")
)

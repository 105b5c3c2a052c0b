package cluster

import (
	"errors"
	"fmt"
)

// The sentinel errors, each with when it is returned. fs maps them to errno
// at the FUSE boundary (DESIGN §Errors): ErrWriterBusy to EBUSY,
// ErrReadOnly to EROFS, ErrNotShared to EOPNOTSUPP, ErrBadURL to EINVAL,
// ErrCluster to EIO; ErrConfig is a mount's one-line error.
var (
	// ErrWriterBusy is returned by an open for writing, a truncate, a
	// chmod, chown or utimes of a file another node has open for writing
	// (its writer lock): the second writer is refused, not queued.
	ErrWriterBusy = errors.New("cluster: another node writes the file")
	// ErrCluster is returned when etcd or S3 did not do what a commit,
	// unlink, rename, fetch or writer lock needed (unreachable, refused,
	// a conflicting transaction); nothing of the operation is visible to
	// other nodes.
	ErrCluster = errors.New("cluster: operation failed")
	// ErrReadOnly is returned by an open for writing, a truncate, a
	// chmod, chown or utimes of an attached object.
	ErrReadOnly = errors.New("cluster: attached objects are read-only")
	// ErrConfig is returned by Dial for a bad or incomplete cluster
	// configuration (flags).
	ErrConfig = errors.New("cluster: bad configuration")
	// ErrBadURL is returned by Attach for a source that is not
	// s3://bucket[/prefix].
	ErrBadURL = errors.New("cluster: want s3://BUCKET[/PREFIX]")
	// ErrNotShared is returned by WarmInfo and Warm for a file that is not
	// a committed cluster file (and by Attach for a directory that is
	// not on a cluster mount).
	ErrNotShared = errors.New("cluster: not a committed cluster file")
)

// errMoved is returned by fillChunk when its file is at another version
// than the one it filled (a reset by a newer commit meanwhile); the fill
// starts again on the file's version. It never leaves the package.
var errMoved = errors.New("cluster: the file moved on to another version")

// ioErr wraps the cause of a failed cluster step in ErrCluster with %v,
// not %w, on purpose: the cause's own sentinels (namespace.ErrNotFound,
// objstore.ErrNotFound, namespace.ErrExists, ...) must not be seen by
// errors.Is in fs, whose errno mapping would then turn an etcd or S3
// failure into ENOENT or EEXIST instead of EIO. Its text stays in the
// message.
func ioErr(what string, err error) error {
	return fmt.Errorf("%w: %s: %v", ErrCluster, what, err)
}

package cluster

import (
	"errors"
	"fmt"
)

// The errors of cluster operations (fs maps them: ErrWriterBusy to EBUSY,
// the others to EIO).
var (
	// ErrWriterBusy: another node has the file open for writing (its
	// writer lock); the second writer is refused, not queued.
	ErrWriterBusy = errors.New("another node writes the file")
	// ErrCluster: etcd or S3 did not do what a commit, unlink, rename,
	// fetch or writer lock needed (unreachable, refused, a conflicting
	// transaction); nothing of the operation is visible to other nodes.
	ErrCluster = errors.New("cluster operation failed")
	// ErrReadOnly: an open for writing of an attached object.
	ErrReadOnly = errors.New("attached objects are read-only")
)

func ioErr(what string, err error) error {
	return fmt.Errorf("%w: %s: %v", ErrCluster, what, err)
}

// errMoved: a fill found its file at another version than the one it
// filled (a reset by a newer commit meanwhile); the fill starts again on
// the file's version. Never returned out of the package.
var errMoved = errors.New("cluster: the file moved on to another version")

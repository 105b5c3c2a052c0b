package fs

import (
	"errors"
	"syscall"

	"github.com/dnnfs/dnnfs/cluster"
	"github.com/dnnfs/dnnfs/core"
)

var errnos = []struct {
	err   error
	errno syscall.Errno
}{
	{core.ErrNotFound, syscall.ENOENT},
	{core.ErrExist, syscall.EEXIST},
	{core.ErrNotEmpty, syscall.ENOTEMPTY},
	{core.ErrIsDir, syscall.EISDIR},
	{core.ErrNotDir, syscall.ENOTDIR},
	{core.ErrNameTooLong, syscall.ENAMETOOLONG},
	{core.ErrNoSpace, syscall.ENOSPC},
	{core.ErrInvalid, syscall.EINVAL},
	{core.ErrNoAttr, syscall.ENODATA},
	{core.ErrRange, syscall.ERANGE},
	{core.ErrTooBig, syscall.EFBIG},
	{core.ErrNotSupp, syscall.EOPNOTSUPP},
	{core.ErrPerm, syscall.EPERM},
	{core.ErrLoop, syscall.EMLINK},
	{core.ErrInterrupted, syscall.EINTR},
	{core.ErrBusy, syscall.EBUSY},
	{core.ErrValueTooBig, syscall.E2BIG},
	{core.ErrTable, syscall.EINVAL},
	{core.ErrIO, syscall.EIO},
	{core.ErrNoSuchOffset, syscall.ENXIO},
	{cluster.ErrWriterBusy, syscall.EBUSY},
	{cluster.ErrReadOnly, syscall.EROFS},
	{cluster.ErrNotShared, syscall.EOPNOTSUPP},
	{cluster.ErrBadURL, syscall.EINVAL},
	{cluster.ErrCluster, syscall.EIO},
}

// errno maps a pool error to the errno a kernel file system returns;
// anything unexpected is EIO (and logged by the caller).
func errno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	for _, e := range errnos {
		if errors.Is(err, e.err) {
			return e.errno
		}
	}
	return syscall.EIO
}

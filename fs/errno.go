package fs

import (
	"errors"
	"syscall"

	"github.com/dnnfs/dnnfs/pool"
)

var errnos = []struct {
	err   error
	errno syscall.Errno
}{
	{pool.ErrNotFound, syscall.ENOENT},
	{pool.ErrExist, syscall.EEXIST},
	{pool.ErrNotEmpty, syscall.ENOTEMPTY},
	{pool.ErrIsDir, syscall.EISDIR},
	{pool.ErrNotDir, syscall.ENOTDIR},
	{pool.ErrNameTooLong, syscall.ENAMETOOLONG},
	{pool.ErrNoSpace, syscall.ENOSPC},
	{pool.ErrInvalid, syscall.EINVAL},
	{pool.ErrNoAttr, syscall.ENODATA},
	{pool.ErrRange, syscall.ERANGE},
	{pool.ErrTooBig, syscall.EFBIG},
	{pool.ErrNotSupp, syscall.EOPNOTSUPP},
	{pool.ErrPerm, syscall.EPERM},
	{pool.ErrLoop, syscall.EMLINK},
	{pool.ErrInterrupted, syscall.EINTR},
	{pool.ErrBusy, syscall.EBUSY},
	{pool.ErrValueTooBig, syscall.E2BIG},
	{pool.ErrTable, syscall.EINVAL},
	{pool.ErrIO, syscall.EIO},
	{pool.ErrNoSuchOffset, syscall.ENXIO},
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

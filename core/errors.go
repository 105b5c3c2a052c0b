package core

import (
	"errors"
	"fmt"

	"github.com/dnnfs/dnnfs/format"
)

// Errors the file-system operations return, wrapped with what failed and
// where (DESIGN.md §Errors). fs maps them to errno (fs/errno.go); nothing
// below fs/ speaks syscall.Errno.
var (
	// ErrNotFound: a name, or the directory it would go in, does not
	// exist (or was removed); a file unlinked while open cannot be linked.
	ErrNotFound = errors.New("core: no such file or directory")
	// ErrExist: the name exists (create, link, rename without replace),
	// the xattr exists (XattrCreate), or the file already has a
	// descriptor (CreateExt).
	ErrExist = errors.New("core: file exists")
	// ErrNotEmpty: rmdir, or a rename over a directory, that has entries.
	ErrNotEmpty = errors.New("core: directory not empty")
	// ErrIsDir: a file operation (read, write, truncate) on a directory,
	// or a rename of a file over a directory.
	ErrIsDir = errors.New("core: is a directory")
	// ErrNotDir: a directory operation on something else, or a rename of
	// a directory over a file.
	ErrNotDir = errors.New("core: not a directory")
	// ErrNameTooLong: a name over format.MaxNameLen bytes.
	ErrNameTooLong = errors.New("core: file name too long")
	// ErrNoSpace: no free block (beyond the metadata reserve, DESIGN.md
	// §Metadata reserve) or inode slot, the pool file's file system is
	// full, or an inode's xattr names would pass XATTR_LIST_MAX.
	ErrNoSpace = errors.New("core: no space left in the pool")
	// ErrInvalid: an argument no file can take (a bad offset, flag or
	// size, a rename into itself, a table descriptor that does not
	// decode, a registry that is not one block).
	ErrInvalid = errors.New("core: invalid argument")
	// ErrNoAttr: the xattr does not exist (or, for the session xattrs,
	// no session is open).
	ErrNoAttr = errors.New("core: no such attribute")
	// ErrRange: an xattr name that is empty or over format.XAMaxName.
	ErrRange = errors.New("core: xattr name empty or too long")
	// ErrTooBig: a file would pass MaxFileSize, or a transaction would
	// not fit the journal (journal.ErrTooLarge).
	ErrTooBig = errors.New("core: file too large")
	// ErrNotSupp: a file type, fallocate mode or file attribute flag the
	// pool does not implement, or one not possible on a table.
	ErrNotSupp = errors.New("core: operation not supported")
	// ErrNotPool: the medium holds no dnnfs pool (format's sentinel,
	// returned through recovery.Mount).
	ErrNotPool = format.ErrNotPool
	// ErrPerm: the operation is refused whoever asks (a hard link to a
	// directory, a default ACL on a file); the file attributes' refusals
	// below wrap it.
	ErrPerm = errors.New("core: operation not permitted")
	// ErrLoop: a link would give a file more than 65000 links (Link).
	ErrLoop = errors.New("core: too many links")
	// ErrIO: the medium failed to store or make bytes durable (a failed
	// write, fallocate, flush or fence); see ioErr.
	ErrIO = errors.New("core: input/output error: the pool medium failed to persist data")

	// ErrImmutable: a change to an immutable file's data, attributes,
	// extended attributes or names (or to the entries of an immutable
	// directory).
	ErrImmutable = fmt.Errorf("%w: the file is immutable", ErrPerm)
	// ErrAppendOnly: an append-only file written other than at its end,
	// truncated, removed or renamed (or an entry of an append-only
	// directory removed or renamed).
	ErrAppendOnly = fmt.Errorf("%w: the file is append-only", ErrPerm)
	// ErrFlagPerm: setting or clearing immutable or append-only without
	// CAP_LINUX_IMMUTABLE.
	ErrFlagPerm = fmt.Errorf("%w: changing immutable or append-only needs CAP_LINUX_IMMUTABLE", ErrPerm)

	// ErrInterrupted: a lock wait was abandoned because the caller is
	// dying (a fatal signal is pending). The FUSE layer answers EINTR.
	ErrInterrupted = errors.New("core: interrupted")
	// ErrNoSuchOffset is lseek's ENXIO: SEEK_DATA or SEEK_HOLE at or past
	// the end of the file, or SEEK_DATA with no data after the offset.
	ErrNoSuchOffset = errors.New("core: no data or hole at or after the offset")
	// ErrBusy: StartSession on a file that already has a session open.
	ErrBusy = errors.New("core: a segmented-I/O session is already open on the file")
	// ErrTable: the operation does not apply to an embedding table (its
	// data lives on the SSD tier; its size is fixed by rows x dim x
	// dtype).
	ErrTable = errors.New("core: not possible on an embedding table")
	// ErrValueTooBig: an xattr value over format.XAMaxValue (65536)
	// bytes, the kernel's own limit (E2BIG).
	ErrValueTooBig = errors.New("core: xattr value too large")
)

// ioErr wraps a medium failure as ErrIO, keeping its text. The cause is
// formatted with %v, not wrapped with %w, on purpose: to errors.Is the
// result is ErrIO and nothing else, so fs maps every medium failure to
// EIO (fs/errno.go), and no sentinel of a layer below (pmem.ErrNoSpace, a
// syscall.Errno of the pool file, journal errors) becomes part of core's
// contract by accident. Callers that give a cause its own meaning test it
// before calling ioErr (writePool and materialize: pmem.ErrNoSpace is
// ErrNoSpace; change.commit: journal.ErrTooLarge is ErrTooBig).
func ioErr(what string, err error) error {
	return fmt.Errorf("%w: %s: %v", ErrIO, what, err)
}

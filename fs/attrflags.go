package fs

import (
	"context"
	"encoding/binary"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"golang.org/x/sys/unix"

	"github.com/dnnfs/dnnfs/format"
)

// File attributes (chattr(1), lsattr(1), xfs_io chattr): the kernel's
// fileattr_get/fileattr_set reach a FUSE file system as FUSE_IOCTL with
// FS_IOC_GETFLAGS/FS_IOC_SETFLAGS (a 4-byte flags word, whatever the
// command's size field says) or FS_IOC_FSGETXATTR/FS_IOC_FSSETXATTR (a
// struct fsxattr). The VFS has checked ownership and CAP_LINUX_IMMUTABLE.

// The FS_*_FL and FS_XFLAG_* attributes dnnfs keeps, those tmpfs keeps
// (values from linux/fs.h).
var attrFlags = []struct{ fl, xflag, inode uint32 }{
	{0x00000010, 0x00000008, format.InodeImmutable}, // FS_IMMUTABLE_FL, FS_XFLAG_IMMUTABLE
	{0x00000020, 0x00000010, format.InodeAppend},    // FS_APPEND_FL, FS_XFLAG_APPEND
	{0x00000040, 0x00000080, format.InodeNoDump},    // FS_NODUMP_FL, FS_XFLAG_NODUMP
	{0x00000080, 0x00000040, format.InodeNoAtime},   // FS_NOATIME_FL, FS_XFLAG_NOATIME
}

// ioctl commands as the kernel's FUSE client sends them (64-bit values;
// the 32-bit compat forms for a 32-bit caller).
const (
	ioctlGetFlags     = uint32(unix.FS_IOC_GETFLAGS)
	ioctlSetFlags     = uint32(unix.FS_IOC_SETFLAGS)
	ioctlGetFlags32   = 0x80046601
	ioctlSetFlags32   = 0x40046602
	ioctlFsGetXattr   = 0x801c581f
	ioctlFsSetXattr   = 0x401c5820
	fsxattrSize       = 28 // struct fsxattr
	fsxattrXflagsOff  = 0
	fsxattrExtsizeOff = 4
	fsxattrProjidOff  = 12
	fsxattrCowextOff  = 16
)

// toAttr maps inode flag bits to FS_*_FL (xflags false) or FS_XFLAG_*.
func toAttr(inode uint32, xflags bool) uint32 {
	var out uint32
	for _, f := range attrFlags {
		if inode&f.inode != 0 {
			if xflags {
				out |= f.xflag
			} else {
				out |= f.fl
			}
		}
	}
	return out
}

// fromAttr maps FS_*_FL or FS_XFLAG_* to inode flag bits; ok is false if
// a bit dnnfs does not keep is set.
func fromAttr(v uint32, xflags bool) (uint32, bool) {
	var out uint32
	for _, f := range attrFlags {
		bit := f.fl
		if xflags {
			bit = f.xflag
		}
		if v&bit != 0 {
			out |= f.inode
			v &^= bit
		}
	}
	return out, v == 0
}

// Ioctl answers the file-attribute ioctls; any other is ENOTTY, as on a
// file system that does not know it.
func (n *node) Ioctl(ctx context.Context, fh gofs.FileHandle, cmd uint32, arg uint64, input []byte, output []byte) (int32, syscall.Errno) {
	le := binary.LittleEndian
	switch cmd {
	case ioctlGetFlags, ioctlGetFlags32:
		if len(output) < 4 {
			return 0, syscall.EINVAL
		}
		le.PutUint32(output, toAttr(n.p.FileFlags(n.in), false))
		return 0, 0
	case ioctlFsGetXattr:
		if len(output) < fsxattrSize {
			return 0, syscall.EINVAL
		}
		clear(output)
		le.PutUint32(output[fsxattrXflagsOff:], toAttr(n.p.FileFlags(n.in), true))
		return 0, 0
	case ioctlSetFlags, ioctlSetFlags32:
		if len(input) < 4 {
			return 0, syscall.EINVAL
		}
		flags, ok := fromAttr(le.Uint32(input), false)
		if !ok {
			return 0, syscall.EOPNOTSUPP
		}
		return 0, n.setFlags(ctx, flags)
	case ioctlFsSetXattr:
		if len(input) < fsxattrSize {
			return 0, syscall.EINVAL
		}
		flags, ok := fromAttr(le.Uint32(input[fsxattrXflagsOff:]), true)
		if !ok || le.Uint32(input[fsxattrExtsizeOff:]) != 0 || le.Uint32(input[fsxattrProjidOff:]) != 0 ||
			le.Uint32(input[fsxattrCowextOff:]) != 0 {
			return 0, syscall.EOPNOTSUPP // extent size hints and projects are not kept
		}
		return 0, n.setFlags(ctx, flags)
	}
	return 0, syscall.ENOTTY
}

func (n *node) setFlags(ctx context.Context, flags uint32) syscall.Errno {
	if err := n.p.SetFileFlags(callerOf(ctx), n.in, flags); err != nil {
		return n.fail("set file attributes", err)
	}
	// The ctime changed behind the kernel's attribute cache (see Write).
	go n.invalidate(-1)
	return 0
}

package fs

import (
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/dnnfs/dnnfs/core"
	"github.com/dnnfs/dnnfs/format"
)

// POSIX ACLs (FUSE_POSIX_ACL): the kernel checks them and caches them,
// and leaves to the daemon what a local file system does beside storing
// them (core/acl.go). Two things only the raw requests carry are handled
// here, before go-fuse's bridge drops them:
//
//   - the umask. With FUSE_DONT_MASK the kernel sends the mode unmasked
//     and the umask beside it, so a new file in a directory with a
//     default ACL gets the ACL's mask, not the umask's (posix_acl_create);
//     anywhere else the umask applies here.
//   - FUSE_SETXATTR_ACL_KILL_SGID (FUSE_SETXATTR_EXT): the caller is
//     neither in the file's group nor has CAP_FSETID, so setting an access
//     ACL clears setgid. It reaches Setxattr as setxattrKillSGID in flags.

// setxattrKillSGID is a flag bit setxattr(2) does not use.
const setxattrKillSGID = 1 << 30

// isACLXattr reports whether name is one of the ACL xattrs.
func isACLXattr(name string) bool {
	return name == core.XattrACLAccess || name == core.XattrACLDefault
}

// applyUmask masks *mode by umask unless the parent directory nodeid
// has a default ACL. The kernel holds the parent's inode lock across
// both a create and setting its ACL, so the answer cannot change before
// the create reaches the pool.
func (k *krefFS) applyUmask(nodeid uint64, mode *uint32, umask uint32) {
	var dir *core.Inode
	if nodeid == fuse.FUSE_ROOT_ID {
		dir = k.p.Root()
	} else {
		k.mu.Lock()
		if r := k.nodes[nodeid]; r != nil {
			dir = r.in
		}
		k.mu.Unlock()
	}
	if dir != nil && k.p.HasDefaultACL(dir) {
		return
	}
	*mode &^= umask & format.ModePerm
}

func (k *krefFS) SetXAttr(cancel <-chan struct{}, in *fuse.SetXAttrIn, attr string, data []byte) fuse.Status {
	in.Flags &^= setxattrKillSGID
	if in.SetXAttrFlags&fuse.SETXATTR_ACL_KILL_SGID != 0 && attr == core.XattrACLAccess {
		in.Flags |= setxattrKillSGID
	}
	return k.RawFileSystem.SetXAttr(cancel, in, attr, data)
}

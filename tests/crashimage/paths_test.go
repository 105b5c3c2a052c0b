package crashimage_test

import (
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/dnnfs/dnnfs/core"
	"github.com/dnnfs/dnnfs/format"
)

// acl encodes a POSIX ACL xattr value (linux/posix_acl_xattr.h): version
// 2, then (tag, perm, id) entries.
func acl(entries ...[3]uint32) []byte {
	b := binary.LittleEndian.AppendUint32(nil, 2)
	for _, e := range entries {
		b = binary.LittleEndian.AppendUint16(b, uint16(e[0]))
		b = binary.LittleEndian.AppendUint16(b, uint16(e[1]))
		b = binary.LittleEndian.AppendUint32(b, e[2])
	}
	return b
}

// ACL tags.
const (
	aclUserObj  = 0x01
	aclUser     = 0x02
	aclGroupObj = 0x04
	aclMask     = 0x10
	aclOther    = 0x20
)

// pathsScript runs the persist paths mainScript leaves out: O_TMPFILE
// files (an orphan from the start, named by link or freed on release),
// device nodes, FIFOs and sockets, POSIX ACLs (access ACLs that set the
// mode, default ACLs a new inode inherits), chown and truncate through
// Setattr, fallocate with unwritten blocks past the size, xattrs on
// special files, and a file kept by a kernel reference after its last
// name is gone.
func pathsScript(x *ext) {
	const bs = format.BlockSize
	s := x.s
	s.mkdir("/p")
	// O_TMPFILE: written while nameless, then linked in.
	var tmp *core.Inode
	s.do("open O_TMPFILE in /p", nil, func() error {
		in, err := s.p.CreateTmpfile(s.lookup("/p"), core.NewInode{Mode: format.ModeReg | 0o600, UID: 7, GID: 7})
		if err == nil {
			s.p.Opened(in)
			tmp = in
		}
		return err
	})
	s.writeIno("write the tmpfile", tmp, 0, pattern(80, 3*bs+5))
	s.do("link the tmpfile as /p/named", nil, func() error { return s.p.Link(tmp, s.lookup("/p"), "named") })
	s.do("release the named tmpfile", nil, func() error { return s.p.Released(tmp) })
	// One that is never named: freed on its last release.
	s.do("open a second O_TMPFILE", nil, func() error {
		in, err := s.p.CreateTmpfile(s.lookup("/p"), core.NewInode{Mode: format.ModeReg | 0o600})
		if err == nil {
			s.p.Opened(in)
			tmp = in
		}
		return err
	})
	s.writeIno("write the second tmpfile", tmp, 0, pattern(81, 5*bs))
	s.do("release the nameless tmpfile", nil, func() error { return s.p.Released(tmp) })
	// Special files.
	mknod := func(path string, mode, rdev uint32) {
		dir, name := split(path)
		s.do(fmt.Sprintf("mknod %s %o", path, mode), nil, func() error {
			_, err := s.p.Create(s.lookup(dir), name, core.NewInode{Mode: mode, UID: 3, GID: 4, Rdev: rdev})
			return err
		})
	}
	mknod("/p/chr", format.ModeChr|0o620, 0x0501)
	mknod("/p/blk", format.ModeBlk|0o660, 0x0803)
	mknod("/p/fifo", format.ModeFifo|0o644, 0)
	mknod("/p/sock", format.ModeSock|0o755, 0)
	s.setxattr("/p/fifo", "user.tag", []byte("on a fifo"), 0, nil)
	s.rename("/p/chr", "/p/sock", core.RenameExchange, nil)
	s.rename("/p/blk", "/p/fifo", 0, nil) // replaces the FIFO and its xattr
	s.link("/p/fifo", "/p/blk2", nil)
	s.unlink("/p/sock")
	// ACLs: an extended access ACL (the mode's group bits become the
	// mask), one the mode says all (not stored), a default ACL inherited
	// by a new file and a new directory.
	setACL := func(path, name string, value []byte) {
		s.do(fmt.Sprintf("set %s on %s", name, path), nil, func() error {
			return s.p.SetACL(s.lookup(path), name, value, false)
		})
	}
	setACL("/p/named", core.XattrACLAccess, acl([3]uint32{aclUserObj, 6, 0}, [3]uint32{aclUser, 4, 1001},
		[3]uint32{aclGroupObj, 4, 0}, [3]uint32{aclMask, 4, 0}, [3]uint32{aclOther, 0, 0}))
	s.chmod("/p/named", 0o640) // rewrites the access ACL
	setACL("/p/named", core.XattrACLAccess, acl([3]uint32{aclUserObj, 7, 0}, [3]uint32{aclGroupObj, 5, 0}, [3]uint32{aclOther, 1, 0}))
	s.mkdir("/p/inherit")
	setACL("/p/inherit", core.XattrACLDefault, acl([3]uint32{aclUserObj, 7, 0}, [3]uint32{aclUser, 5, 1002},
		[3]uint32{aclGroupObj, 5, 0}, [3]uint32{aclMask, 5, 0}, [3]uint32{aclOther, 0, 0}))
	s.create("/p/inherit/f", 0o666)
	s.mkdir("/p/inherit/d")
	s.do("create an O_TMPFILE under a default ACL", nil, func() error {
		in, err := s.p.CreateTmpfile(s.lookup("/p/inherit"), core.NewInode{Mode: format.ModeReg | 0o644})
		if err != nil {
			return err
		}
		s.p.Opened(in)
		if err := s.p.Link(in, s.lookup("/p/inherit"), "t"); err != nil {
			return err
		}
		return s.p.Released(in)
	})
	s.removexattr("/p/inherit", core.XattrACLDefault)
	// chown, setgid, truncate through Setattr.
	s.create("/p/owned", 0o644)
	s.write("/p/owned", 0, 2*bs+7, 82)
	s.do("chmod /p/owned 2755 and chown it", nil, func() error {
		mode, uid, gid := uint32(0o2755), uint32(500), uint32(600)
		return s.p.Setattr(s.lookup("/p/owned"), core.SetAttr{Mode: &mode, UID: &uid, GID: &gid})
	})
	s.do("truncate /p/owned to 100 through Setattr", nil, func() error {
		size := uint64(100)
		in := s.lookup("/p/owned")
		if err := s.p.Setattr(in, core.SetAttr{Size: &size}); err != nil {
			return err
		}
		s.unsure[in.Ino] = s.unsure[in.Ino].remove(size, 1<<62)
		return nil
	})
	s.fallocate("/p/owned", 0, 6*bs, 0)                      // unwritten blocks before and past the size
	s.write("/p/owned", 2*bs, 100, 83)                       // converts one
	s.fallocate("/p/owned", 5*bs, 4*bs, core.FallocKeepSize) // beyond the end, size kept
	s.truncate("/p/owned", 7*bs)                             // over the kept-size blocks
	s.unlink("/p/inherit/f")
	s.rmdir("/p/inherit/d", nil)
	// A file the kernel still references (an O_PATH descriptor, the cwd)
	// outlives its last name until FORGET.
	held := s.lookup("/p/owned")
	s.do("kernel reference to /p/owned", nil, func() error { s.p.KernelRef(held); return nil })
	s.unlink("/p/owned")
	s.do("FORGET of /p/owned", nil, func() error { return s.p.KernelForget(held) })
}

// TestFencesMorePaths checks every fence of pathsScript like TestFences.
func TestFencesMorePaths(t *testing.T) {
	s := newScript(t, poolSize)
	x := newExt(s)
	pathsScript(x)
	x.close()
	verifyScript(t, s, nil)
}

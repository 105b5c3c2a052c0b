package core

import (
	"encoding/binary"
	"slices"
	"time"

	"github.com/dnnfs/dnnfs/format"
)

// POSIX ACLs are stored as the xattrs the kernel hands over with
// FUSE_POSIX_ACL, in the kernel's xattr wire format; the kernel checks
// them. What a local file system does beside storing them is done here,
// as fs/posix_acl.c does it: an access ACL sets the mode's permission
// bits (and is dropped when the mode says it all), chmod rewrites the
// access ACL, and a new inode gets its parent's default ACL.
const (
	XattrACLAccess  = "system.posix_acl_access"
	XattrACLDefault = "system.posix_acl_default"
)

// ACL entry tags and the xattr format version (linux/posix_acl_xattr.h).
const (
	aclUserObj  = 0x01
	aclUser     = 0x02
	aclGroupObj = 0x04
	aclGroup    = 0x08
	aclMask     = 0x10
	aclOther    = 0x20

	aclVersion   = 2
	aclHeader    = 4
	aclEntrySize = 8
)

type aclEntry struct {
	tag, perm uint16
	id        uint32
}

// parseACL decodes and validates an ACL xattr value as the kernel's
// posix_acl_from_xattr and posix_acl_valid do: entries in the order
// user::, user:ID..., group::, group:ID..., mask::, other::, a mask
// wherever named entries are, permissions rwx only.
func parseACL(b []byte) ([]aclEntry, error) {
	if len(b) < aclHeader+aclEntrySize || (len(b)-aclHeader)%aclEntrySize != 0 ||
		binary.LittleEndian.Uint32(b) != aclVersion {
		return nil, ErrInvalid
	}
	es := make([]aclEntry, 0, (len(b)-aclHeader)/aclEntrySize)
	for p := aclHeader; p < len(b); p += aclEntrySize {
		es = append(es, aclEntry{
			tag:  binary.LittleEndian.Uint16(b[p:]),
			perm: binary.LittleEndian.Uint16(b[p+2:]),
			id:   binary.LittleEndian.Uint32(b[p+4:]),
		})
	}
	const done = 0
	state, needsMask := uint16(aclUserObj), false
	for _, e := range es {
		if e.perm&^7 != 0 {
			return nil, ErrInvalid
		}
		switch {
		case e.tag == aclUserObj && state == aclUserObj:
			state = aclUser
		case e.tag == aclUser && state == aclUser:
			needsMask = true
		case e.tag == aclGroupObj && state == aclUser:
			state = aclGroup
		case e.tag == aclGroup && state == aclGroup:
			needsMask = true
		case e.tag == aclMask && state == aclGroup:
			state = aclOther
		case e.tag == aclOther && (state == aclOther || state == aclGroup && !needsMask):
			state = done
		default:
			return nil, ErrInvalid
		}
	}
	if state != done {
		return nil, ErrInvalid
	}
	return es, nil
}

func encodeACL(es []aclEntry) []byte {
	b := make([]byte, aclHeader+aclEntrySize*len(es))
	binary.LittleEndian.PutUint32(b, aclVersion)
	for i, e := range es {
		p := aclHeader + i*aclEntrySize
		binary.LittleEndian.PutUint16(b[p:], e.tag)
		binary.LittleEndian.PutUint16(b[p+2:], e.perm)
		binary.LittleEndian.PutUint32(b[p+4:], e.id)
	}
	return b
}

// aclEquivMode is posix_acl_equiv_mode: the permission bits an ACL
// gives (the mask stands for the group bits), and whether the ACL says
// more than those bits can.
func aclEquivMode(es []aclEntry) (perm uint32, extended bool) {
	for _, e := range es {
		p := uint32(e.perm & 7)
		switch e.tag {
		case aclUserObj:
			perm |= p << 6
		case aclGroupObj:
			perm |= p << 3
		case aclOther:
			perm |= p
		case aclMask:
			perm = perm&^0o070 | p<<3
			extended = true
		default:
			extended = true
		}
	}
	return perm, extended
}

// aclChmod is posix_acl_chmod_masq: the ACL after a chmod to mode.
func aclChmod(es []aclEntry, mode uint32) []aclEntry {
	es = slices.Clone(es)
	group := -1
	for i := range es {
		switch es[i].tag {
		case aclUserObj:
			es[i].perm = uint16(mode >> 6 & 7)
		case aclOther:
			es[i].perm = uint16(mode & 7)
		case aclGroupObj:
			if group < 0 {
				group = i
			}
		case aclMask:
			group = i // the mask, not group::, holds the group bits
		}
	}
	if group >= 0 {
		es[group].perm = uint16(mode >> 3 & 7)
	}
	return es
}

// aclCreate is posix_acl_create_masq: a new inode's access ACL from its
// parent's default ACL and the mode it was created with, and the mode
// it gets. extended is false when the mode says it all (no ACL stored).
func aclCreate(def []aclEntry, mode uint32) (es []aclEntry, newMode uint32, extended bool) {
	es = slices.Clone(def)
	group, mask := -1, -1
	for i := range es {
		e := &es[i]
		switch e.tag {
		case aclUserObj:
			e.perm &= uint16(mode >> 6 & 7)
			mode &= uint32(e.perm)<<6 | ^uint32(0o700)
		case aclUser, aclGroup:
			extended = true
		case aclGroupObj:
			group = i
		case aclOther:
			e.perm &= uint16(mode & 7)
			mode &= uint32(e.perm) | ^uint32(0o007)
		case aclMask:
			mask = i
			extended = true
		}
	}
	if mask < 0 {
		mask = group
	}
	es[mask].perm &= uint16(mode >> 3 & 7)
	mode &= uint32(es[mask].perm)<<3 | ^uint32(0o070)
	return es, mode, extended
}

// xattrIndex is the position of xattr name in xs, or -1.
func xattrIndex(xs []format.Xattr, name string) int {
	return slices.IndexFunc(xs, func(x format.Xattr) bool { return x.Name == name })
}

// withXattr returns xs with name set to value, or removed if value is nil.
func withXattr(xs []format.Xattr, name string, value []byte) []format.Xattr {
	xs = slices.Clone(xs)
	i := xattrIndex(xs, name)
	switch {
	case value == nil && i >= 0:
		return slices.Delete(xs, i, i+1)
	case value == nil:
		return xs
	case i >= 0:
		xs[i] = format.Xattr{Name: name, Value: value}
		return xs
	}
	return append(xs, format.Xattr{Name: name, Value: value})
}

// SetACL sets an access or default ACL (name is XattrACLAccess or
// XattrACLDefault) as a local file system does: an access ACL sets the
// mode's permission bits from its user::, mask:: (or group::) and
// other:: entries, and is not stored when those bits say it all.
// killSGID (the kernel's FUSE_SETXATTR_ACL_KILL_SGID: the caller is
// neither in the file's group nor has CAP_FSETID) clears setgid with an
// access ACL, as posix_acl_update_mode does.
func (fs *FS) SetACL(in *Inode, name string, value []byte, killSGID bool) error {
	if len(value) > format.XAMaxValue {
		return ErrValueTooBig
	}
	es, err := parseACL(value)
	if err != nil {
		return err
	}
	if name == XattrACLDefault && !in.IsDir() {
		return ErrPerm // the VFS refuses this first (EACCES)
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if err := in.checkRemoveLocked(); err != nil {
		return err
	}
	nd := in.d
	stored := slices.Clone(value)
	if name == XattrACLAccess {
		perm, extended := aclEquivMode(es)
		nd.Mode = nd.Mode&^0o777 | perm
		if killSGID {
			nd.Mode &^= modeSGID
		}
		if !extended {
			stored = nil
		}
	}
	return fs.putXattrsInodeLocked(in, withXattr(in.xattrs, name, stored), nd)
}

// HasDefaultACL reports whether directory dir has a default ACL: then a
// new file's mode is masked by that ACL, not by the caller's umask.
func (fs *FS) HasDefaultACL(dir *Inode) bool {
	dir.mu.Lock()
	defer dir.mu.Unlock()
	return xattrIndex(dir.xattrs, XattrACLDefault) >= 0
}

// inheritACLLocked is posix_acl_create for a new inode of mode in dir
// (dir.mu held): the mode it gets and the ACL xattrs it starts with.
// Symlinks and directories without a default ACL inherit nothing.
// Precondition: dir.mu is held.
func inheritACLLocked(dir *Inode, mode uint32) (uint32, []format.Xattr) {
	i := xattrIndex(dir.xattrs, XattrACLDefault)
	if i < 0 || mode&format.ModeType == format.ModeLnk {
		return mode, nil
	}
	def, err := parseACL(dir.xattrs[i].Value)
	if err != nil {
		return mode, nil // stored by SetACL, so valid; fsck does not check values
	}
	es, perm, extended := aclCreate(def, mode&0o777)
	mode = mode&^0o777 | perm
	var xs []format.Xattr
	if extended {
		xs = append(xs, format.Xattr{Name: XattrACLAccess, Value: encodeACL(es)})
	}
	if mode&format.ModeType == format.ModeDir {
		xs = append(xs, format.Xattr{Name: XattrACLDefault, Value: slices.Clone(dir.xattrs[i].Value)})
	}
	return mode, xs
}

// chmodACLLocked returns in's xattrs with the access ACL rewritten for
// mode (posix_acl_chmod), and whether anything changed.
// Precondition: in.mu is held.
func chmodACLLocked(in *Inode, mode uint32) ([]format.Xattr, bool) {
	i := xattrIndex(in.xattrs, XattrACLAccess)
	if i < 0 || in.typ == format.ModeLnk {
		return nil, false
	}
	es, err := parseACL(in.xattrs[i].Value)
	if err != nil {
		return nil, false
	}
	v := encodeACL(aclChmod(es, mode))
	if slices.Equal(v, in.xattrs[i].Value) {
		return nil, false
	}
	return withXattr(in.xattrs, XattrACLAccess, v), true
}

// chmodACL rewrites in's access ACL for its current mode in a
// transaction of its own (after a truncate that also changed the mode).
func (fs *FS) chmodACL(in *Inode) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	xs, changed := chmodACLLocked(in, in.d.Mode)
	if !changed {
		return nil
	}
	nd := in.d
	nd.Ctime = time.Now().UnixNano()
	return fs.putXattrsInodeLocked(in, xs, nd)
}

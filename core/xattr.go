package core

import (
	"slices"
	"time"

	"github.com/dnnfs/dnnfs/format"
)

// maxXattrList is the kernel's XATTR_LIST_MAX: listxattr cannot return
// more, so setxattr refuses a new name that would make the list longer.
const maxXattrList = 65536

// Xattr flags (setxattr(2)).
const (
	XattrCreate  = 1
	XattrReplace = 2
)

// Getxattr returns the value of attribute name.
func (fs *FS) Getxattr(in *Inode, name string) ([]byte, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	for _, x := range in.xattrs {
		if x.Name == name {
			return slices.Clone(x.Value), nil
		}
	}
	return nil, ErrNoAttr
}

// Listxattr returns the attribute names.
func (fs *FS) Listxattr(in *Inode) []string {
	in.mu.Lock()
	defer in.mu.Unlock()
	names := make([]string, len(in.xattrs))
	for i, x := range in.xattrs {
		names[i] = x.Name
	}
	return names
}

// Setxattr sets attribute name (flags: XattrCreate, XattrReplace).
func (fs *FS) Setxattr(in *Inode, name string, value []byte, flags uint32) error {
	if len(name) == 0 || len(name) > format.XAMaxName {
		return ErrRange
	}
	if len(value) > format.XAMaxValue {
		return ErrValueTooBig
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if err := in.checkRemoveLocked(); err != nil {
		return err // xattr_permission: no attribute changes on immutable or append-only files
	}
	i := slices.IndexFunc(in.xattrs, func(x format.Xattr) bool { return x.Name == name })
	switch {
	case i >= 0 && flags&XattrCreate != 0:
		return ErrExist
	case i < 0 && flags&XattrReplace != 0:
		return ErrNoAttr
	}
	xs := slices.Clone(in.xattrs)
	x := format.Xattr{Name: name, Value: slices.Clone(value)}
	if i >= 0 {
		xs[i] = x
	} else {
		xs = append(xs, x)
		list := 0
		for _, x := range xs {
			list += len(x.Name) + 1
		}
		if list > maxXattrList {
			return ErrNoSpace // as ext4 when an inode's attribute space is full
		}
	}
	return fs.putXattrsLocked(in, xs)
}

// Removexattr deletes attribute name.
func (fs *FS) Removexattr(in *Inode, name string) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if err := in.checkRemoveLocked(); err != nil {
		return err
	}
	i := slices.IndexFunc(in.xattrs, func(x format.Xattr) bool { return x.Name == name })
	if i < 0 {
		return ErrNoAttr
	}
	return fs.putXattrsLocked(in, slices.Delete(slices.Clone(in.xattrs), i, i+1))
}

// putXattrsLocked rewrites the inode's xattr region through the journal,
// moving it to a new run of blocks when its length changes.
// Precondition: in.mu is held.
func (fs *FS) putXattrsLocked(in *Inode, xs []format.Xattr) error {
	return fs.putXattrsInodeLocked(in, xs, in.d)
}

// putXattrsInodeLocked commits xs as the inode's xattrs and nd (with a
// new ctime) as its inode in one transaction.
// Precondition: in.mu is held.
func (fs *FS) putXattrsInodeLocked(in *Inode, xs []format.Xattr, nd format.Inode) error {
	c := fs.begin()
	nd.Ctime = time.Now().UnixNano()
	if err := c.stageXattrsLocked(in, &nd, xs); err != nil {
		c.abort()
		return err
	}
	c.putInode(in, nd)
	return c.commit()
}

// stageXattrsLocked stages xs as the xattr region of in, whose inode
// will be nd: in place when its length stays, else in new blocks.
// Precondition: in.mu is held.
func (c *change) stageXattrsLocked(in *Inode, nd *format.Inode, xs []format.Xattr) error {
	nb := uint64(format.XattrBlocks(xs))
	if nb == 0 {
		return ErrNoSpace
	}
	if nd.Xattr != 0 && (len(xs) == 0 || nb != in.xattrBlocks) {
		c.freed = append(c.freed, format.Extent{Phys: nd.Xattr, Len: in.xattrBlocks})
		nd.Xattr = 0
	}
	if len(xs) == 0 {
		nb = 0
	} else {
		if nd.Xattr == 0 {
			b, err := c.allocMeta(c.fs.sb.DataStart, nb)
			if err != nil {
				return err
			}
			nd.Xattr = b
		}
		buf := make([]byte, nb*format.BlockSize)
		format.EncodeXattrs(buf, xs)
		c.tx.Write(nd.Xattr.Off(), buf)
	}
	c.after = append(c.after, func() { in.xattrs, in.xattrBlocks = xs, nb })
	return nil
}

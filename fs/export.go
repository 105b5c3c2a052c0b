package fs

import (
	"context"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/dnnfs/dnnfs/core"
	"github.com/dnnfs/dnnfs/format"
)

// File handles (name_to_handle_at, open_by_handle_at, NFS export). The
// kernel's handle is the node ID and generation; node IDs are inode
// numbers (Options.ExternalNodeID), so a handle names a pool inode even
// after the kernel and go-fuse forgot it, or after a remount. The kernel
// resolves such a node ID with a LOOKUP of "." (LookupNode) and, to
// reconnect a directory, of ".." (LookupParent), then compares the
// generation in the reply with the handle's: an inode number reused for
// a new file has a new generation, so the old handle gets ESTALE.

var (
	_ = (gofs.NodeLookupNoder)((*dirNode)(nil))
	_ = (gofs.NodeLookupParenter)((*dirNode)(nil))
)

// LookupNode resolves a node ID the kernel no longer holds. An unlinked
// inode is gone as far as handles go (the kernel would have it cached if
// anything still used it), and request files are found by name only.
func (n *dirNode) LookupNode(ctx context.Context, id uint64, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	if id&lookupInoBit != 0 {
		return nil, syscall.ESTALE
	}
	in := n.p.Inode(core.Ino(id))
	if in == nil || in.Attr().Nlink == 0 {
		return nil, syscall.ESTALE
	}
	return n.child(ctx, in, out), 0
}

// LookupParent finds a directory's parent and the directory's name in it.
func (n *dirNode) LookupParent(ctx context.Context, out *fuse.EntryOut) (*gofs.Inode, string, syscall.Errno) {
	if n.in.Ino == format.RootIno {
		return nil, "", syscall.ESTALE
	}
	p := n.p.Parent(n.in)
	if p == nil {
		return nil, "", syscall.ESTALE
	}
	name := ""
	for pos := uint64(0); ; {
		e, ok := n.p.ReadDir(p, pos)
		if !ok {
			break
		}
		if e.Ino == n.in.Ino {
			name = e.Name
			break
		}
		pos = e.Next
	}
	if name == "" {
		return nil, "", syscall.ESTALE // renamed or removed meanwhile
	}
	if p.Ino == format.RootIno {
		a := p.Attr()
		fillAttr(&a, &out.Attr)
		return n.Root(), name, 0
	}
	return n.child(ctx, p, out), name, 0
}

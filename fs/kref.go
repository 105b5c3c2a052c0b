package fs

import (
	"sync"
	"syscall"
	"unsafe"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"go.uber.org/zap"

	"github.com/dnnfs/dnnfs/core"
)

// krefFS counts the kernel's references to each inode exactly as the
// kernel does: every reply that hands the kernel a node ID (LOOKUP,
// CREATE, MKNOD, MKDIR, SYMLINK, LINK, TMPFILE, each READDIRPLUS entry)
// adds one to that node ID's lookup count, and FORGET subtracts what the
// kernel says it drops. The pool keeps an unlinked inode, its data and
// its number, while any node ID of it is still counted (core.KernelRef),
// so an O_PATH descriptor, /proc/self/fd/N, a cwd or an mmap of a deleted
// file keeps reading that file, never zeros, and its number is never
// handed to a new file while the kernel may still name it.
//
// It sits between the go-fuse server and go-fuse's node bridge instead of
// using NodeOnForgetter: go-fuse may build a node for a lookup and then
// drop it for another node of the same identity, and such nodes never get
// OnForget, so counting nodes would leak references. The reply is counted
// before the server sends it, so a FORGET can never arrive first.
type krefFS struct {
	fuse.RawFileSystem
	p   *core.FS
	log *zap.Logger

	mu    sync.Mutex
	nodes map[uint64]*kref // node ID -> its inode and lookup count
}

type kref struct {
	in      *core.Inode
	nlookup uint64
}

// NewRawFS returns the FUSE file system for root with kernel references
// counted into the pool and the umask applied (acl.go); pass it to
// fuse.NewServer (Mount does). Every mount of MountOptions must use it:
// they ask the kernel for FUSE_DONT_MASK.
func NewRawFS(root gofs.InodeEmbedder, p *core.FS, opts *gofs.Options, log *zap.Logger) fuse.RawFileSystem {
	if log == nil {
		log = zap.NewNop()
	}
	return &krefFS{RawFileSystem: gofs.NewNodeFS(root, opts), p: p, log: log, nodes: map[uint64]*kref{}}
}

// Mount mounts the pool's root on dir and serves it; like gofs.Mount, but
// with kernel references counted (NewRawFS).
func Mount(dir string, root gofs.InodeEmbedder, p *core.FS, opts *gofs.Options, log *zap.Logger) (*fuse.Server, error) {
	server, err := fuse.NewServer(NewRawFS(root, p, opts, log), dir, &opts.MountOptions)
	if err != nil {
		return nil, err
	}
	go server.Serve()
	if err := server.WaitMount(); err != nil {
		_ = server.Unmount()
		return nil, err
	}
	if err := SetReadAhead(dir); err != nil && log != nil {
		log.Warn("read-ahead stays at the kernel's default", zap.String("mountpoint", dir), zap.Error(err))
	}
	return server, nil
}

// ref counts one reference to the node ID of a successful entry reply.
func (k *krefFS) ref(out *fuse.EntryOut) {
	if out.NodeId == 0 || out.NodeId == fuse.FUSE_ROOT_ID {
		return // a negative entry, or the root (never forgotten)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	r := k.nodes[out.NodeId]
	if r == nil {
		in := k.p.Inode(core.Ino(out.Attr.Ino))
		if in == nil {
			return // a virtual node (a table's .lookup file)
		}
		r = &kref{in: in}
		k.nodes[out.NodeId] = r
		k.p.KernelRef(in)
	}
	r.nlookup++
}

func (k *krefFS) Forget(nodeid, nlookup uint64) {
	k.RawFileSystem.Forget(nodeid, nlookup)
	k.mu.Lock()
	r := k.nodes[nodeid]
	var last *core.Inode
	if r != nil {
		r.nlookup -= min(nlookup, r.nlookup)
		if r.nlookup == 0 {
			delete(k.nodes, nodeid)
			last = r.in
		}
	}
	k.mu.Unlock()
	if last != nil {
		if err := k.p.KernelForget(last); err != nil {
			k.log.Error("freeing an unlinked inode after the kernel forgot it failed; the next mount frees it",
				zap.Uint64("ino", uint64(last.Ino)), zap.Error(err))
		}
	}
}

func (k *krefFS) Lookup(cancel <-chan struct{}, header *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	if name == "." {
		// The kernel resolves a file handle whose inode it no longer
		// caches (export.go). An unlinked inode may still be known to
		// go-fuse until its FORGET is served, which would answer for it:
		// a deleted file's handle must give ESTALE instead.
		if in := k.p.Inode(core.Ino(header.NodeId)); in == nil || in.Attr().Nlink == 0 {
			return fuse.Status(syscall.ESTALE)
		}
	}
	st := k.RawFileSystem.Lookup(cancel, header, name, out)
	if st.Ok() {
		k.ref(out)
	}
	return st
}

func (k *krefFS) Mknod(cancel <-chan struct{}, in *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	k.applyUmask(in.NodeId, &in.Mode, in.Umask)
	st := k.RawFileSystem.Mknod(cancel, in, name, out)
	if st.Ok() {
		k.ref(out)
	}
	return st
}

func (k *krefFS) Mkdir(cancel <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	k.applyUmask(in.NodeId, &in.Mode, in.Umask)
	st := k.RawFileSystem.Mkdir(cancel, in, name, out)
	if st.Ok() {
		k.ref(out)
	}
	return st
}

func (k *krefFS) Link(cancel <-chan struct{}, in *fuse.LinkIn, name string, out *fuse.EntryOut) fuse.Status {
	st := k.RawFileSystem.Link(cancel, in, name, out)
	if st.Ok() {
		k.ref(out)
	}
	return st
}

func (k *krefFS) Symlink(cancel <-chan struct{}, header *fuse.InHeader, target, name string, out *fuse.EntryOut) fuse.Status {
	st := k.RawFileSystem.Symlink(cancel, header, target, name, out)
	if st.Ok() {
		k.ref(out)
	}
	return st
}

func (k *krefFS) Create(cancel <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	k.applyUmask(in.NodeId, &in.Mode, in.Umask)
	st := k.RawFileSystem.Create(cancel, in, name, out)
	if st.Ok() {
		k.ref(&out.EntryOut)
	}
	return st
}

func (k *krefFS) Tmpfile(cancel <-chan struct{}, in *fuse.CreateIn, out *fuse.CreateOut) fuse.Status {
	k.applyUmask(in.NodeId, &in.Mode, in.Umask)
	st := k.RawFileSystem.Tmpfile(cancel, in, out)
	if st.Ok() {
		k.ref(&out.EntryOut)
	}
	return st
}

// ReadDirPlus counts the node ID of every entry in the reply: the kernel
// links each one (fuse_direntplus_link) whether or not the caller's
// buffer takes it.
func (k *krefFS) ReadDirPlus(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	st := k.RawFileSystem.ReadDirPlus(cancel, in, out)
	if st.Ok() {
		forEachEntryOut(out.Bytes(), k.ref)
	}
	return st
}

// forEachEntryOut walks a READDIRPLUS reply: per entry a fuse_entry_out,
// a fuse_dirent {ino u64, off u64, namelen u32, type u32} and the name,
// padded to 8 bytes (include/uapi/linux/fuse.h).
func forEachEntryOut(buf []byte, fn func(*fuse.EntryOut)) {
	const entryOutSize = int(unsafe.Sizeof(fuse.EntryOut{}))
	const direntSize = 24
	for len(buf) >= entryOutSize+direntSize {
		eo := (*fuse.EntryOut)(unsafe.Pointer(&buf[0]))
		nameLen := int(*(*uint32)(unsafe.Pointer(&buf[entryOutSize+16])))
		rec := (entryOutSize + direntSize + nameLen + 7) &^ 7
		if rec > len(buf) {
			return
		}
		fn(eo)
		buf = buf[rec:]
	}
}

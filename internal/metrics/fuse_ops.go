package metrics

// One method per FUSE operation dnnfs answers, each the same few lines:
// read the clock, call the wrapped file system, record (fuseMetrics.done).

import (
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// op is a FUSE operation type: the "op" label of the request metrics.
type op uint8

const (
	opLookup op = iota
	opGetattr
	opSetattr
	opMknod
	opMkdir
	opUnlink
	opRmdir
	opRename
	opLink
	opSymlink
	opReadlink
	opGetxattr
	opListxattr
	opSetxattr
	opRemovexattr
	opCreate
	opTmpfile
	opOpen
	opRead
	opLseek
	opIoctl
	opFlush
	opFsync
	opFallocate
	opOpendir
	opReaddir
	opReaddirplus
	opFsyncdir
	opStatfs
	opStatx
	opForget
	opRelease
	opReleasedir
	opWrite
	numOps
)

// opNames are the label values, indexed by op.
var opNames = [numOps]string{
	opLookup:      "lookup",
	opGetattr:     "getattr",
	opSetattr:     "setattr",
	opMknod:       "mknod",
	opMkdir:       "mkdir",
	opUnlink:      "unlink",
	opRmdir:       "rmdir",
	opRename:      "rename",
	opLink:        "link",
	opSymlink:     "symlink",
	opReadlink:    "readlink",
	opGetxattr:    "getxattr",
	opListxattr:   "listxattr",
	opSetxattr:    "setxattr",
	opRemovexattr: "removexattr",
	opCreate:      "create",
	opTmpfile:     "tmpfile",
	opOpen:        "open",
	opRead:        "read",
	opLseek:       "lseek",
	opIoctl:       "ioctl",
	opFlush:       "flush",
	opFsync:       "fsync",
	opFallocate:   "fallocate",
	opOpendir:     "opendir",
	opReaddir:     "readdir",
	opReaddirplus: "readdirplus",
	opFsyncdir:    "fsyncdir",
	opStatfs:      "statfs",
	opStatx:       "statx",
	opForget:      "forget",
	opRelease:     "release",
	opReleasedir:  "releasedir",
	opWrite:       "write",
}

// FUSE returns raw with every request it answers timed (latency
// histogram and error count per operation type) and its open file handles
// counted. Operations dnnfs does not answer (POSIX locks, copy_file_range)
// pass through untimed. With metrics off (nil s) raw is returned as it is.
func (s *Server) FUSE(raw fuse.RawFileSystem) fuse.RawFileSystem {
	if s == nil {
		return raw
	}
	return &timedFS{RawFileSystem: raw, m: s.fuse}
}

// timedFS times the requests of the file system it wraps.
type timedFS struct {
	fuse.RawFileSystem
	m *fuseMetrics
}

// --- one method per operation ---

func (f *timedFS) Lookup(cancel <-chan struct{}, header *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	t := time.Now()
	s := f.RawFileSystem.Lookup(cancel, header, name, out)
	f.m.done(opLookup, t, s)
	return s
}

func (f *timedFS) GetAttr(cancel <-chan struct{}, input *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	t := time.Now()
	s := f.RawFileSystem.GetAttr(cancel, input, out)
	f.m.done(opGetattr, t, s)
	return s
}

func (f *timedFS) SetAttr(cancel <-chan struct{}, input *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	t := time.Now()
	s := f.RawFileSystem.SetAttr(cancel, input, out)
	f.m.done(opSetattr, t, s)
	return s
}

func (f *timedFS) Mknod(cancel <-chan struct{}, input *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	t := time.Now()
	s := f.RawFileSystem.Mknod(cancel, input, name, out)
	f.m.done(opMknod, t, s)
	return s
}

func (f *timedFS) Mkdir(cancel <-chan struct{}, input *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	t := time.Now()
	s := f.RawFileSystem.Mkdir(cancel, input, name, out)
	f.m.done(opMkdir, t, s)
	return s
}

func (f *timedFS) Unlink(cancel <-chan struct{}, header *fuse.InHeader, name string) fuse.Status {
	t := time.Now()
	s := f.RawFileSystem.Unlink(cancel, header, name)
	f.m.done(opUnlink, t, s)
	return s
}

func (f *timedFS) Rmdir(cancel <-chan struct{}, header *fuse.InHeader, name string) fuse.Status {
	t := time.Now()
	s := f.RawFileSystem.Rmdir(cancel, header, name)
	f.m.done(opRmdir, t, s)
	return s
}

func (f *timedFS) Rename(cancel <-chan struct{}, input *fuse.RenameIn, oldName string, newName string) fuse.Status {
	t := time.Now()
	s := f.RawFileSystem.Rename(cancel, input, oldName, newName)
	f.m.done(opRename, t, s)
	return s
}

func (f *timedFS) Link(cancel <-chan struct{}, input *fuse.LinkIn, filename string, out *fuse.EntryOut) fuse.Status {
	t := time.Now()
	s := f.RawFileSystem.Link(cancel, input, filename, out)
	f.m.done(opLink, t, s)
	return s
}

func (f *timedFS) Symlink(cancel <-chan struct{}, header *fuse.InHeader, pointedTo string, linkName string, out *fuse.EntryOut) fuse.Status {
	t := time.Now()
	s := f.RawFileSystem.Symlink(cancel, header, pointedTo, linkName, out)
	f.m.done(opSymlink, t, s)
	return s
}

func (f *timedFS) Readlink(cancel <-chan struct{}, header *fuse.InHeader) ([]byte, fuse.Status) {
	t := time.Now()
	r, s := f.RawFileSystem.Readlink(cancel, header)
	f.m.done(opReadlink, t, s)
	return r, s
}

func (f *timedFS) GetXAttr(cancel <-chan struct{}, header *fuse.InHeader, attr string, dest []byte) (uint32, fuse.Status) {
	t := time.Now()
	r, s := f.RawFileSystem.GetXAttr(cancel, header, attr, dest)
	f.m.done(opGetxattr, t, s)
	return r, s
}

func (f *timedFS) ListXAttr(cancel <-chan struct{}, header *fuse.InHeader, dest []byte) (uint32, fuse.Status) {
	t := time.Now()
	r, s := f.RawFileSystem.ListXAttr(cancel, header, dest)
	f.m.done(opListxattr, t, s)
	return r, s
}

func (f *timedFS) SetXAttr(cancel <-chan struct{}, input *fuse.SetXAttrIn, attr string, data []byte) fuse.Status {
	t := time.Now()
	s := f.RawFileSystem.SetXAttr(cancel, input, attr, data)
	f.m.done(opSetxattr, t, s)
	return s
}

func (f *timedFS) RemoveXAttr(cancel <-chan struct{}, header *fuse.InHeader, attr string) fuse.Status {
	t := time.Now()
	s := f.RawFileSystem.RemoveXAttr(cancel, header, attr)
	f.m.done(opRemovexattr, t, s)
	return s
}

func (f *timedFS) Create(cancel <-chan struct{}, input *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	t := time.Now()
	s := f.RawFileSystem.Create(cancel, input, name, out)
	f.m.done(opCreate, t, s)
	if s == fuse.OK {
		f.m.open.Inc()
	}
	return s
}

func (f *timedFS) Tmpfile(cancel <-chan struct{}, input *fuse.CreateIn, out *fuse.CreateOut) fuse.Status {
	t := time.Now()
	s := f.RawFileSystem.Tmpfile(cancel, input, out)
	f.m.done(opTmpfile, t, s)
	if s == fuse.OK {
		f.m.open.Inc()
	}
	return s
}

func (f *timedFS) Open(cancel <-chan struct{}, input *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	t := time.Now()
	s := f.RawFileSystem.Open(cancel, input, out)
	f.m.done(opOpen, t, s)
	if s == fuse.OK {
		f.m.open.Inc()
	}
	return s
}

func (f *timedFS) Read(cancel <-chan struct{}, input *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	t := time.Now()
	r, s := f.RawFileSystem.Read(cancel, input, buf)
	f.m.done(opRead, t, s)
	return r, s
}

func (f *timedFS) Lseek(cancel <-chan struct{}, input *fuse.LseekIn, out *fuse.LseekOut) fuse.Status {
	t := time.Now()
	s := f.RawFileSystem.Lseek(cancel, input, out)
	f.m.done(opLseek, t, s)
	return s
}

func (f *timedFS) Ioctl(cancel <-chan struct{}, input *fuse.IoctlIn, inbuf []byte, output *fuse.IoctlOut, outbuf []byte) fuse.Status {
	t := time.Now()
	s := f.RawFileSystem.Ioctl(cancel, input, inbuf, output, outbuf)
	f.m.done(opIoctl, t, s)
	return s
}

func (f *timedFS) Flush(cancel <-chan struct{}, input *fuse.FlushIn) fuse.Status {
	t := time.Now()
	s := f.RawFileSystem.Flush(cancel, input)
	f.m.done(opFlush, t, s)
	return s
}

func (f *timedFS) Fsync(cancel <-chan struct{}, input *fuse.FsyncIn) fuse.Status {
	t := time.Now()
	s := f.RawFileSystem.Fsync(cancel, input)
	f.m.done(opFsync, t, s)
	return s
}

func (f *timedFS) Fallocate(cancel <-chan struct{}, input *fuse.FallocateIn) fuse.Status {
	t := time.Now()
	s := f.RawFileSystem.Fallocate(cancel, input)
	f.m.done(opFallocate, t, s)
	return s
}

func (f *timedFS) OpenDir(cancel <-chan struct{}, input *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	t := time.Now()
	s := f.RawFileSystem.OpenDir(cancel, input, out)
	f.m.done(opOpendir, t, s)
	return s
}

func (f *timedFS) ReadDir(cancel <-chan struct{}, input *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	t := time.Now()
	s := f.RawFileSystem.ReadDir(cancel, input, out)
	f.m.done(opReaddir, t, s)
	return s
}

func (f *timedFS) ReadDirPlus(cancel <-chan struct{}, input *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	t := time.Now()
	s := f.RawFileSystem.ReadDirPlus(cancel, input, out)
	f.m.done(opReaddirplus, t, s)
	return s
}

func (f *timedFS) FsyncDir(cancel <-chan struct{}, input *fuse.FsyncIn) fuse.Status {
	t := time.Now()
	s := f.RawFileSystem.FsyncDir(cancel, input)
	f.m.done(opFsyncdir, t, s)
	return s
}

func (f *timedFS) StatFs(cancel <-chan struct{}, input *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	t := time.Now()
	s := f.RawFileSystem.StatFs(cancel, input, out)
	f.m.done(opStatfs, t, s)
	return s
}

func (f *timedFS) Statx(cancel <-chan struct{}, input *fuse.StatxIn, out *fuse.StatxOut) fuse.Status {
	t := time.Now()
	s := f.RawFileSystem.Statx(cancel, input, out)
	f.m.done(opStatx, t, s)
	return s
}

func (f *timedFS) Forget(nodeid, nlookup uint64) {
	t := time.Now()
	f.RawFileSystem.Forget(nodeid, nlookup)
	f.m.done(opForget, t, fuse.OK)
}

func (f *timedFS) Release(cancel <-chan struct{}, input *fuse.ReleaseIn) {
	t := time.Now()
	f.RawFileSystem.Release(cancel, input)
	f.m.done(opRelease, t, fuse.OK)
	f.m.open.Dec()
}

func (f *timedFS) ReleaseDir(input *fuse.ReleaseIn) {
	t := time.Now()
	f.RawFileSystem.ReleaseDir(input)
	f.m.done(opReleasedir, t, fuse.OK)
}

// Write and Writev are one operation, WRITE: the server calls Writev and
// falls back to Write on ENOSYS (a node without Writev, given data in
// more than one slice), which is then the request's only answer.
func (f *timedFS) Write(cancel <-chan struct{}, input *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	t := time.Now()
	n, s := f.RawFileSystem.Write(cancel, input, data)
	f.m.done(opWrite, t, s)
	return n, s
}

func (f *timedFS) Writev(cancel <-chan struct{}, input *fuse.WriteIn, data [][]byte) (uint32, fuse.Status) {
	t := time.Now()
	n, s := f.RawFileSystem.Writev(cancel, input, data)
	if s != fuse.ENOSYS {
		f.m.done(opWrite, t, s)
	}
	return n, s
}

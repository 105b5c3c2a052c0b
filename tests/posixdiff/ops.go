package posixdiff

import (
	"bytes"
	"fmt"
	"runtime/debug"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// ---------------------------------------------------------------------------
// Open / close

func (r *runner) opCreate() {
	path := r.pickNew()
	acc := []int{unix.O_WRONLY, unix.O_RDWR, unix.O_RDWR, unix.O_RDONLY}[r.rng.IntN(4)]
	flags := unix.O_CREAT | acc
	if r.chance(25) {
		flags |= unix.O_EXCL
	}
	if r.chance(25) {
		flags |= unix.O_TRUNC
	}
	if r.chance(20) {
		flags |= unix.O_APPEND
	}
	r.openOp("create", path, flags, r.createMode())
}

func (r *runner) opOpen() {
	path := r.pick(70, unix.S_IFREG)
	if r.chance(10) {
		path = r.pick(80, unix.S_IFDIR, unix.S_IFLNK)
	}
	flags := []int{unix.O_RDONLY, unix.O_RDONLY, unix.O_WRONLY, unix.O_RDWR, unix.O_RDWR}[r.rng.IntN(5)]
	if r.chance(10) {
		flags |= unix.O_TRUNC
	}
	if r.chance(15) {
		flags |= unix.O_APPEND
	}
	if r.chance(5) {
		flags |= unix.O_NOFOLLOW
	}
	if r.chance(5) {
		flags |= unix.O_DIRECTORY
	}
	r.openOp("open", path, flags, 0)
}

// openOp opens path on both sides and registers a handle if both succeed.
func (r *runner) openOp(name, path string, flags int, mode uint32) {
	if len(r.handles) >= maxHandles {
		r.closeHandle(r.rng.IntN(len(r.handles)))
	}
	switch r.specialType(path) {
	case unix.S_IFCHR, unix.S_IFBLK:
		r.statPath(path) // opening a device would reach the device, not the file system
		return
	case unix.S_IFIFO:
		flags |= unix.O_NONBLOCK // a FIFO without a peer would block the opener
	}
	id := r.nextID + 1
	fds := [2]int{-1, -1}
	desc := fmt.Sprintf("h%d = %s %q %s", id, name, shortPath(path), flagStr(flags))
	if flags&unix.O_CREAT != 0 {
		desc += fmt.Sprintf(" mode=%04o", mode)
	}
	ra, _ := r.do(name, desc, func(s int) res {
		fd, err := retryN(func() (int, error) {
			return unix.Open(r.p(s, path), flags|unix.O_CLOEXEC, mode)
		})
		if err != nil {
			return fromErr(err)
		}
		fds[s] = fd
		r.fds[s][fd] = true
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return okRes("fstat:" + errName(toErrno(err)))
		}
		return okRes(statVal(&st))
	})
	if ra.errno == 0 {
		r.nextID = id
		r.handles = append(r.handles, &handle{id: id, fd: fds, path: path, flags: flags})
	}
}

func (r *runner) opClose() {
	if len(r.handles) == 0 {
		r.opOpen()
		return
	}
	r.closeHandle(r.rng.IntN(len(r.handles)))
}

func (r *runner) closeHandle(i int) {
	h := r.handles[i]
	r.handles = append(r.handles[:i], r.handles[i+1:]...)
	r.do("close", fmt.Sprintf("close h%d (%q)", h.id, shortPath(h.path)), func(s int) res {
		err := unix.Close(h.fd[s]) // never retried: the fd is gone even on EINTR
		delete(r.fds[s], h.fd[s])
		return fromErr(err)
	})
}

func (r *runner) hdesc(h *handle) string {
	return fmt.Sprintf("h%d(%q %s)", h.id, shortPath(h.path), flagStr(h.flags))
}

// ---------------------------------------------------------------------------
// Data

func (r *runner) opPwrite() {
	h := r.pickHandleFor(unix.O_WRONLY)
	if h == nil {
		r.opCreate()
		return
	}
	n := r.writeSize()
	off := r.pickOffset(r.fstatSize(h.fd[0]), n)
	buf := r.bytes(n)
	r.do("pwrite", fmt.Sprintf("pwrite %s off=%d len=%d", r.hdesc(h), off, n), func(s int) res {
		return r.withSize(nRes(retryN(func() (int, error) { return unix.Pwrite(h.fd[s], buf, off) })), h.fd[s])
	})
}

func (r *runner) opWrite() {
	h := r.pickHandleFor(unix.O_WRONLY)
	if h == nil {
		r.opCreate()
		return
	}
	n := r.writeSize()
	if r.fstatSize(h.fd[0])+int64(n) > maxFileSize {
		n = 0
	}
	buf := r.bytes(n)
	r.do("write", fmt.Sprintf("write %s len=%d", r.hdesc(h), n), func(s int) res {
		return r.withSize(nRes(retryN(func() (int, error) { return unix.Write(h.fd[s], buf) })), h.fd[s])
	})
}

func (r *runner) opPread() {
	h := r.pickHandleFor(unix.O_RDONLY)
	if h == nil {
		r.opOpen()
		return
	}
	n := r.readSize()
	off := r.pickOffset(r.fstatSize(h.fd[0]), n)
	r.do("pread", fmt.Sprintf("pread %s off=%d len=%d", r.hdesc(h), off, n), func(s int) res {
		buf := make([]byte, n)
		got, err := retryN(func() (int, error) { return unix.Pread(h.fd[s], buf, off) })
		x := nRes(got, err)
		if err == nil {
			x.data = buf[:got]
		}
		return x
	})
}

func (r *runner) opRead() {
	h := r.pickHandleFor(unix.O_RDONLY)
	if h == nil {
		r.opOpen()
		return
	}
	n := r.readSize()
	r.do("read", fmt.Sprintf("read %s len=%d", r.hdesc(h), n), func(s int) res {
		buf := make([]byte, n)
		got, err := retryN(func() (int, error) { return unix.Read(h.fd[s], buf) })
		x := nRes(got, err)
		if err == nil {
			x.data = buf[:got]
		}
		return x
	})
}

func (r *runner) opLseek() {
	h := r.pickHandle()
	if h == nil {
		r.opOpen()
		return
	}
	var st unix.Stat_t
	if unix.Fstat(h.fd[0], &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
		// Directory offsets are opaque cookies and SEEK_END/SEEK_CUR on
		// directories are fs-specific (tmpfs: EINVAL, FUSE: generic llseek
		// on i_size); only rewinddir is portable.
		r.do("lseek", fmt.Sprintf("lseek %s (dir) off=0 SEEK_SET", r.hdesc(h)), func(s int) res {
			pos, err := unix.Seek(h.fd[s], 0, unix.SEEK_SET)
			if err != nil {
				return fromErr(err)
			}
			return okRes(fmt.Sprintf("pos=%d", pos))
		})
		return
	}
	size := st.Size
	var whence int
	var off int64
	switch r.rng.IntN(3) {
	case 0:
		whence, off = unix.SEEK_SET, r.rng.Int64N(size+10000)
	case 1:
		whence, off = unix.SEEK_CUR, r.rng.Int64N(20000)-10000
	default:
		whence, off = unix.SEEK_END, r.rng.Int64N(size+10000)-size
	}
	if r.chance(3) {
		whence, off = unix.SEEK_SET, -1
	}
	r.do("lseek", fmt.Sprintf("lseek %s off=%d whence=%d", r.hdesc(h), off, whence), func(s int) res {
		pos, err := unix.Seek(h.fd[s], off, whence)
		if err != nil {
			return fromErr(err)
		}
		return okRes(fmt.Sprintf("pos=%d", pos))
	})
}

func (r *runner) opTruncate() {
	path := r.pick(75, unix.S_IFREG)
	l := r.newSize(r.lstatSizeA(path))
	r.do("truncate", fmt.Sprintf("truncate %q len=%d", shortPath(path), l), func(s int) res {
		x := fromErr(retry(func() error { return unix.Truncate(r.p(s, path), l) }))
		var st unix.Stat_t
		if x.errno == 0 && unix.Stat(r.p(s, path), &st) == nil {
			x.val = fmt.Sprintf("size=%d", st.Size)
		}
		return x
	})
}

func (r *runner) opFtruncate() {
	h := r.pickHandleFor(unix.O_WRONLY)
	if h == nil {
		r.opTruncate()
		return
	}
	l := r.newSize(r.fstatSize(h.fd[0]))
	r.do("ftruncate", fmt.Sprintf("ftruncate %s len=%d", r.hdesc(h), l), func(s int) res {
		return r.withSize(fromErr(retry(func() error { return unix.Ftruncate(h.fd[s], l) })), h.fd[s])
	})
}

func (r *runner) opFallocate() {
	h := r.pickHandleFor(unix.O_WRONLY)
	if h == nil {
		r.opCreate()
		return
	}
	mode := uint32(0)
	if r.chance(40) {
		mode = unix.FALLOC_FL_KEEP_SIZE
	}
	length := 1 + r.rng.Int64N(1<<20)
	if r.chance(3) {
		length = 0 // EINVAL
	}
	off := r.pickOffset(r.fstatSize(h.fd[0]), int(length))
	if off+length > maxFileSize {
		length = max(0, maxFileSize-max(off, 0))
	}
	r.do("fallocate", fmt.Sprintf("fallocate %s mode=%d off=%d len=%d", r.hdesc(h), mode, off, length), func(s int) res {
		return r.withSize(fromErr(retry(func() error { return unix.Fallocate(h.fd[s], mode, off, length) })), h.fd[s])
	})
}

func (r *runner) opFsync() {
	h := r.pickHandle()
	if h == nil {
		r.opOpen()
		return
	}
	if r.chance(50) {
		r.do("fsync", "fsync "+r.hdesc(h), func(s int) res {
			return fromErr(retry(func() error { return unix.Fsync(h.fd[s]) }))
		})
	} else {
		r.do("fdatasync", "fdatasync "+r.hdesc(h), func(s int) res {
			return fromErr(retry(func() error { return unix.Fdatasync(h.fd[s]) }))
		})
	}
}

// opMmap maps a region of an existing file MAP_SHARED on both sides,
// compares the mapped bytes, writes into the mapping, optionally msyncs,
// unmaps and closes. Later reads must see the written bytes.
func (r *runner) opMmap() {
	path := r.pick(90, unix.S_IFREG)
	if t := r.specialType(path); t == unix.S_IFCHR || t == unix.S_IFBLK {
		r.statPath(path)
		return
	}
	fds := [2]int{-1, -1}
	closeBoth := func() {
		r.do("close", fmt.Sprintf("mmap: close %q", shortPath(path)), func(s int) res {
			err := unix.Close(fds[s])
			delete(r.fds[s], fds[s])
			return fromErr(err)
		})
	}
	ra, _ := r.do("mmap-open", fmt.Sprintf("mmap: open %q O_RDWR", shortPath(path)), func(s int) res {
		fd, err := retryN(func() (int, error) { return unix.Open(r.p(s, path), unix.O_RDWR|unix.O_CLOEXEC, 0) })
		if err != nil {
			return fromErr(err)
		}
		fds[s] = fd
		r.fds[s][fd] = true
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return okRes("fstat:" + errName(toErrno(err)))
		}
		return okRes(statVal(&st)) // includes the size: equal on both sides from here on
	})
	if ra.errno != 0 {
		return
	}
	size := r.fstatSize(fds[0])
	if size == 0 {
		closeBoth()
		return
	}
	off := r.rng.Int64N((size+4095)/4096) * 4096
	length := int(min(size-off, 1+r.rng.Int64N(64<<10)))
	var mem [2][]byte
	ra, _ = r.do("mmap", fmt.Sprintf("mmap %q off=%d len=%d MAP_SHARED", shortPath(path), off, length), func(s int) res {
		m, err := unix.Mmap(fds[s], off, length, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		if err != nil {
			return fromErr(err)
		}
		mem[s] = m
		r.maps = append(r.maps, m)
		cp := make([]byte, length)
		if err := safeCopy(cp, m); err != nil {
			return okRes("reading the mapping: " + err.Error())
		}
		return res{data: cp}
	})
	if ra.errno == 0 {
		for range 1 + r.rng.IntN(4) {
			pos := r.rng.IntN(length)
			n := 1 + r.rng.IntN(min(length-pos, 8192))
			buf := r.bytes(n)
			r.do("mmap-write", fmt.Sprintf("mmap-write %q at file offset %d len=%d", shortPath(path), off+int64(pos), n), func(s int) res {
				if err := safeCopy(mem[s][pos:pos+n], buf); err != nil {
					return okRes(err.Error())
				}
				return res{}
			})
		}
		if r.chance(50) {
			r.do("msync", fmt.Sprintf("msync %q MS_SYNC", shortPath(path)), func(s int) res {
				return fromErr(retry(func() error { return unix.Msync(mem[s], unix.MS_SYNC) }))
			})
		}
		r.do("munmap", fmt.Sprintf("munmap %q", shortPath(path)), func(s int) res {
			err := unix.Munmap(mem[s])
			r.forgetMap(mem[s])
			return fromErr(err)
		})
	}
	closeBoth()
}

func (r *runner) forgetMap(m []byte) {
	for i, x := range r.maps {
		if len(x) > 0 && len(m) > 0 && &x[0] == &m[0] {
			r.maps = append(r.maps[:i], r.maps[i+1:]...)
			return
		}
	}
}

// safeCopy copies between Go memory and a mapping, turning SIGBUS/SIGSEGV
// (e.g. a mapping beyond EOF, or a dead FUSE daemon) into an error.
func safeCopy(dst, src []byte) (err error) {
	old := debug.SetPanicOnFault(true)
	defer debug.SetPanicOnFault(old)
	defer func() {
		if e := recover(); e != nil {
			err = fmt.Errorf("memory fault: %v", e)
		}
	}()
	copy(dst, src)
	return nil
}

// ---------------------------------------------------------------------------
// Namespace

func (r *runner) opRename() {
	src := r.pick(80)
	srcType := r.typeOf(src)
	var dst string
	switch n := r.rng.IntN(100); {
	case n < 20 && srcType != 0:
		if p, ok := r.existing(srcType); ok {
			dst = p
		} else {
			dst = r.newPath()
		}
	case n < 40:
		if p, ok := r.existing(); ok {
			dst = p
		} else {
			dst = r.newPath()
		}
	case n < 75:
		dst = r.newPath()
	case n < 85: // into itself: EINVAL for directories
		var under []string
		for _, e := range r.entries {
			if strings.HasPrefix(e.rel, src+"/") {
				under = append(under, e.rel)
			}
		}
		if len(under) > 0 && r.chance(50) {
			dst = under[r.rng.IntN(len(under))]
		} else {
			dst = join(src, r.randName())
		}
	case n < 90:
		dst = src
	default:
		dst = r.badPath()
	}
	flags, op := 0, "rename"
	switch n := r.rng.IntN(100); {
	case n < 15:
		flags, op = unix.RENAME_NOREPLACE, "rename-noreplace"
	case n < 30:
		flags, op = unix.RENAME_EXCHANGE, "rename-exchange"
	}
	r.do(op, fmt.Sprintf("%s %q -> %q", op, shortPath(src), shortPath(dst)), func(s int) res {
		return fromErr(retry(func() error {
			if flags == 0 {
				return unix.Rename(r.p(s, src), r.p(s, dst))
			}
			return unix.Renameat2(unix.AT_FDCWD, r.p(s, src), unix.AT_FDCWD, r.p(s, dst), uint(flags))
		}))
	})
}

func (r *runner) opLink() {
	src := r.pick(75, unix.S_IFREG)
	dst := r.pickNew()
	r.do("link", fmt.Sprintf("link %q -> %q", shortPath(src), shortPath(dst)), func(s int) res {
		x := fromErr(retry(func() error { return unix.Link(r.p(s, src), r.p(s, dst)) }))
		var st unix.Stat_t
		if x.errno == 0 && unix.Lstat(r.p(s, dst), &st) == nil {
			x.val = statVal(&st)
		}
		return x
	})
}

func (r *runner) opUnlink() {
	path := r.pick(70, unix.S_IFREG, unix.S_IFLNK)
	r.do("unlink", fmt.Sprintf("unlink %q", shortPath(path)), func(s int) res {
		return fromErr(retry(func() error { return unix.Unlink(r.p(s, path)) }))
	})
}

func (r *runner) opSymlink() {
	path := r.pickNew()
	target := r.symTarget(lastElem(path))
	r.do("symlink", fmt.Sprintf("symlink %q -> target %q", shortPath(path), shortStr(target)), func(s int) res {
		x := fromErr(retry(func() error { return unix.Symlink(target, r.p(s, path)) }))
		var st unix.Stat_t
		if x.errno == 0 && unix.Lstat(r.p(s, path), &st) == nil {
			x.val = statVal(&st)
		}
		return x
	})
}

func (r *runner) opReadlink() {
	path := r.pick(75, unix.S_IFLNK)
	r.do("readlink", fmt.Sprintf("readlink %q", shortPath(path)), func(s int) res {
		buf := make([]byte, 8192)
		n, err := retryN(func() (int, error) { return unix.Readlink(r.p(s, path), buf) })
		if err != nil {
			return fromErr(err)
		}
		return okRes(fmt.Sprintf("%q", shortStr(string(buf[:n])))).withData(buf[:n])
	})
}

func (x res) withData(b []byte) res {
	x.data = append([]byte(nil), b...)
	return x
}

func (r *runner) opMkdir() {
	path := r.pickNew()
	mode := dirModes[r.rng.IntN(len(dirModes))]
	r.do("mkdir", fmt.Sprintf("mkdir %q mode=%04o", shortPath(path), mode), func(s int) res {
		x := fromErr(retry(func() error { return unix.Mkdir(r.p(s, path), mode) }))
		var st unix.Stat_t
		if x.errno == 0 && unix.Lstat(r.p(s, path), &st) == nil {
			x.val = statVal(&st)
		}
		return x
	})
}

func (r *runner) opRmdir() {
	path := r.pick(75, unix.S_IFDIR)
	r.do("rmdir", fmt.Sprintf("rmdir %q", shortPath(path)), func(s int) res {
		return fromErr(retry(func() error { return unix.Rmdir(r.p(s, path)) }))
	})
}

// opRmtree removes a whole subtree bottom-up (used to shrink a full tree).
func (r *runner) opRmtree() {
	d, ok := r.existing(unix.S_IFDIR)
	if !ok {
		r.opUnlink()
		return
	}
	var victims []entry
	for _, e := range r.entries {
		if strings.HasPrefix(e.rel, d+"/") {
			victims = append(victims, e)
		}
	}
	sort.Slice(victims, func(i, j int) bool { return victims[i].depth > victims[j].depth })
	victims = append(victims, entry{rel: d, typ: unix.S_IFDIR})
	for _, e := range victims {
		if e.typ == unix.S_IFDIR {
			r.do("rmdir", fmt.Sprintf("rmtree: rmdir %q", shortPath(e.rel)), func(s int) res {
				return fromErr(retry(func() error { return unix.Rmdir(r.p(s, e.rel)) }))
			})
		} else {
			r.do("unlink", fmt.Sprintf("rmtree: unlink %q", shortPath(e.rel)), func(s int) res {
				return fromErr(retry(func() error { return unix.Unlink(r.p(s, e.rel)) }))
			})
		}
	}
}

func (r *runner) opFchmod() {
	h := r.pickHandle()
	if h == nil {
		r.opChmod()
		return
	}
	mode := r.chmodMode()
	r.do("fchmod", fmt.Sprintf("fchmod %s %04o", r.hdesc(h), mode), func(s int) res {
		x := fromErr(retry(func() error { return unix.Fchmod(h.fd[s], mode) }))
		var st unix.Stat_t
		if unix.Fstat(h.fd[s], &st) == nil {
			x.val = statVal(&st)
		}
		return x
	})
}

func (r *runner) opChmod() {
	mode := r.chmodMode()
	path := r.pick(85)
	r.do("chmod", fmt.Sprintf("chmod %q %04o", shortPath(path), mode), func(s int) res {
		x := fromErr(retry(func() error { return unix.Chmod(r.p(s, path), mode) }))
		var st unix.Stat_t
		if x.errno == 0 && unix.Stat(r.p(s, path), &st) == nil {
			x.val = statVal(&st)
		}
		return x
	})
}

// ---------------------------------------------------------------------------
// Metadata reads

func (r *runner) opStat() {
	path := r.pick(60)
	if r.chance(5) {
		path = ""
	}
	follow := r.chance(50)
	name := "lstat"
	if follow {
		name = "stat"
	}
	r.do(name, fmt.Sprintf("%s %q", name, shortPath(path)), func(s int) res {
		var st unix.Stat_t
		err := retry(func() error {
			if follow {
				return unix.Stat(r.p(s, path), &st)
			}
			return unix.Lstat(r.p(s, path), &st)
		})
		if err != nil {
			return fromErr(err)
		}
		return okRes(statVal(&st))
	})
}

func (r *runner) opFstat() {
	h := r.pickHandle()
	if h == nil {
		r.opStat()
		return
	}
	r.do("fstat", "fstat "+r.hdesc(h), func(s int) res {
		var st unix.Stat_t
		if err := retry(func() error { return unix.Fstat(h.fd[s], &st) }); err != nil {
			return fromErr(err)
		}
		return okRes(statVal(&st))
	})
}

func (r *runner) opReaddir() {
	path := r.pick(75, unix.S_IFDIR)
	if r.chance(20) {
		path = ""
	}
	r.do("readdir", fmt.Sprintf("readdir %q", shortPath(path)), func(s int) res {
		ents, errno := readDir(r.p(s, path))
		if errno != 0 {
			return res{errno: errno}
		}
		parts := make([]string, len(ents))
		for i, e := range ents {
			parts[i] = shortPath(e.name) + ":" + dtChar(e.typ)
		}
		return okRes("[" + strings.Join(parts, " ") + "]")
	})
}

// ---------------------------------------------------------------------------
// Extended attributes (user.* only)

func (r *runner) xattrName() string {
	if r.chance(2) {
		return "user." + strings.Repeat("z", 251) // 256 bytes: ERANGE
	}
	return xattrNames[r.rng.IntN(len(xattrNames))]
}

// existingXattrName prefers (70%) a user.* name that path has on side A.
func (r *runner) existingXattrName(path string) string {
	if r.chance(70) {
		if names, errno := listUserXattrs(r.p(0, path)); errno == 0 && len(names) > 0 {
			return names[r.rng.IntN(len(names))]
		}
	}
	return r.xattrName()
}

func (r *runner) xattrPath() string {
	if r.chance(5) {
		return ""
	}
	return r.pick(80, unix.S_IFREG, unix.S_IFDIR)
}

func (r *runner) opSetxattr() {
	path, name := r.xattrPath(), r.xattrName()
	var n int
	switch k := r.rng.IntN(100); {
	case k < 10:
		n = 0
	case k < 60:
		n = 1 + r.rng.IntN(64)
	case k < 90:
		n = 64 + r.rng.IntN(960)
	default:
		n = 1024 + r.rng.IntN(maxXattrValue-1024+1)
	}
	val := r.bytes(n)
	flags, fname := 0, ""
	switch k := r.rng.IntN(100); {
	case k < 20:
		flags, fname = unix.XATTR_CREATE, " XATTR_CREATE"
	case k < 40:
		flags, fname = unix.XATTR_REPLACE, " XATTR_REPLACE"
	}
	nofollow := r.chance(10)
	op := "setxattr"
	if nofollow {
		op = "lsetxattr"
	}
	r.do(op, fmt.Sprintf("%s %q %s len=%d%s", op, shortPath(path), shortStr(name), n, fname), func(s int) res {
		return fromErr(retry(func() error {
			if nofollow {
				return unix.Lsetxattr(r.p(s, path), name, val, flags)
			}
			return unix.Setxattr(r.p(s, path), name, val, flags)
		}))
	})
}

func (r *runner) opGetxattr() {
	path := r.xattrPath()
	name := r.existingXattrName(path)
	size := 64 << 10
	switch k := r.rng.IntN(100); {
	case k < 15:
		size = 0 // returns the value's size
	case k < 25:
		size = r.rng.IntN(64) // ERANGE if the value is longer
	}
	nofollow := r.chance(10)
	op := "getxattr"
	if nofollow {
		op = "lgetxattr"
	}
	r.do(op, fmt.Sprintf("%s %q %s bufsize=%d", op, shortPath(path), shortStr(name), size), func(s int) res {
		buf := make([]byte, size)
		n, err := retryN(func() (int, error) {
			if nofollow {
				return unix.Lgetxattr(r.p(s, path), name, buf)
			}
			return unix.Getxattr(r.p(s, path), name, buf)
		})
		x := nRes(n, err)
		if err == nil && size > 0 {
			x.data = buf[:n]
		}
		return x
	})
}

func (r *runner) opListxattr() {
	path := r.xattrPath()
	r.do("listxattr", fmt.Sprintf("listxattr %q", shortPath(path)), func(s int) res {
		names, errno := listUserXattrs(r.p(s, path))
		if errno != 0 {
			return res{errno: errno}
		}
		for i := range names {
			names[i] = shortStr(names[i])
		}
		return okRes("[" + strings.Join(names, " ") + "]")
	})
}

func (r *runner) opRemovexattr() {
	path := r.xattrPath()
	name := r.existingXattrName(path)
	r.do("removexattr", fmt.Sprintf("removexattr %q %s", shortPath(path), shortStr(name)), func(s int) res {
		return fromErr(retry(func() error { return unix.Removexattr(r.p(s, path), name) }))
	})
}

// listUserXattrs returns the sorted user.* attribute names of path
// (following symlinks).
func listUserXattrs(path string) ([]string, unix.Errno) {
	buf := make([]byte, 64<<10)
	n, err := retryN(func() (int, error) { return unix.Listxattr(path, buf) })
	if err != nil {
		return nil, toErrno(err)
	}
	var names []string
	for _, nm := range bytes.Split(buf[:n], []byte{0}) {
		if len(nm) > 0 && bytes.HasPrefix(nm, []byte("user.")) {
			names = append(names, string(nm))
		}
	}
	sort.Strings(names)
	return names, 0
}

package posixdiff

import (
	"fmt"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Operation kinds added with the fixes of docs/POSIX.md; each can be switched off
// to bisect a difference.
var (
	// SpecialFiles generates mkfifo and mknod of sockets, character and
	// block devices.
	SpecialFiles = true
	// OPathUnlink makes unlink-open also hold an unlinked file only through
	// an O_PATH descriptor and read it back through /proc/self/fd.
	OPathUnlink = true
	// SpecialModes lets chmod set the setuid, setgid and sticky bits and
	// makes probes write to files they can open for writing, which must
	// clear setuid/setgid.
	SpecialModes = true
	// NullModes lets create and mknod use mode 0000.
	NullModes = true
)

// createMode is a random mode for create and mknod.
func (r *runner) createMode() uint32 {
	if NullModes && r.chance(10) {
		return 0
	}
	return fileModes[r.rng.IntN(len(fileModes))]
}

// chmodMode is a random mode for chmod and fchmod.
func (r *runner) chmodMode() uint32 {
	if SpecialModes && r.chance(30) {
		return uint32(r.rng.IntN(0o10000))
	}
	return uint32(r.rng.IntN(0o1000))
}

// enabled reports whether operation name may be generated in this run.
func (r *runner) enabled(name string) bool {
	switch name {
	case "mknod":
		return SpecialFiles
	case "probe":
		return r.probeUID != 0
	}
	return true
}

// specialType is the type of what path resolves to on side A (symlinks
// followed) if it is a FIFO, socket or device node, else 0.
func (r *runner) specialType(path string) uint32 {
	var st unix.Stat_t
	if unix.Stat(r.p(0, path), &st) != nil {
		return 0
	}
	switch t := st.Mode & unix.S_IFMT; t {
	case unix.S_IFIFO, unix.S_IFSOCK, unix.S_IFCHR, unix.S_IFBLK:
		return t
	}
	return 0
}

// statPath is a stat (following symlinks) of path on both sides.
func (r *runner) statPath(path string) {
	r.do("stat", fmt.Sprintf("stat %q", shortPath(path)), func(s int) res {
		var st unix.Stat_t
		if err := retry(func() error { return unix.Stat(r.p(s, path), &st) }); err != nil {
			return fromErr(err)
		}
		return okRes(statVal(&st))
	})
}

// Device numbers for mknod: /dev/null and a loop device that rarely
// exists, harmless should anything open them. Device nodes are never
// opened by the generator (the reference tmpfs allows devices, a FUSE
// mount does not).
var specialKinds = []struct {
	name string
	typ  uint32
	dev  int
}{
	{"fifo", unix.S_IFIFO, 0},
	{"sock", unix.S_IFSOCK, 0},
	{"chr", unix.S_IFCHR, int(unix.Mkdev(1, 3))},
	{"blk", unix.S_IFBLK, int(unix.Mkdev(7, 200))},
}

func (r *runner) opMknod() {
	path := r.pickNew()
	k := specialKinds[r.rng.IntN(len(specialKinds))]
	mode := r.createMode()
	r.do("mknod", fmt.Sprintf("mknod %q %s mode=%04o", shortPath(path), k.name, mode), func(s int) res {
		x := fromErr(retry(func() error {
			if k.typ == unix.S_IFIFO {
				return unix.Mkfifo(r.p(s, path), mode)
			}
			return unix.Mknod(r.p(s, path), k.typ|mode, k.dev)
		}))
		var st unix.Stat_t
		if x.errno == 0 && unix.Lstat(r.p(s, path), &st) == nil {
			x.val = statVal(&st)
		}
		return x
	})
}

// owners are the uids and gids chown picks from (-1: unchanged).
var owners = []int{0, 0, 65534, 1000, -1}

func (r *runner) opChown() {
	path := r.pick(85)
	uid, gid := owners[r.rng.IntN(len(owners))], owners[r.rng.IntN(len(owners))]
	nofollow := r.chance(20)
	op := "chown"
	if nofollow {
		op = "lchown"
	}
	r.do(op, fmt.Sprintf("%s %q %d:%d", op, shortPath(path), uid, gid), func(s int) res {
		x := fromErr(retry(func() error {
			if nofollow {
				return unix.Lchown(r.p(s, path), uid, gid)
			}
			return unix.Chown(r.p(s, path), uid, gid)
		}))
		var st unix.Stat_t
		var err error
		if nofollow {
			err = unix.Lstat(r.p(s, path), &st)
		} else {
			err = unix.Stat(r.p(s, path), &st)
		}
		if x.errno == 0 && err == nil {
			x.val = fmt.Sprintf("%s owner=%d:%d", statVal(&st), st.Uid, st.Gid)
		}
		return x
	})
}

// asUser runs f on a new OS thread whose credentials are uid and gid with
// no supplementary groups and no capabilities. Linux credentials are per
// thread and the raw system calls (unlike glibc's and Go's setuid) change
// only the calling thread; the thread stays locked, so it exits with f.
func asUser(uid, gid uint32, f func()) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		for _, c := range []struct {
			name string
			nr   uintptr
			a    [3]uintptr
		}{
			{"setgroups", unix.SYS_SETGROUPS, [3]uintptr{0, 0, 0}},
			{"setresgid", unix.SYS_SETRESGID, [3]uintptr{uintptr(gid), uintptr(gid), uintptr(gid)}},
			{"setresuid", unix.SYS_SETRESUID, [3]uintptr{uintptr(uid), uintptr(uid), uintptr(uid)}},
		} {
			if _, _, e := unix.RawSyscall(c.nr, c.a[0], c.a[1], c.a[2]); e != 0 {
				errc <- fmt.Errorf("%s: %w", c.name, e)
				return
			}
		}
		f()
		errc <- nil
	}()
	return <-errc
}

// opProbe accesses a path as the unprivileged probe user (after the chmod
// and chown operations changed modes and owners): stat, access(2) for each
// permission, opens for reading (reading a little, or listing a directory)
// and for writing, and sometimes creating a file in it.
func (r *runner) opProbe() {
	path := r.pick(85)
	if r.chance(10) {
		path = ""
	}
	create := ""
	if r.chance(30) {
		create = r.randName()
	}
	special := r.specialType(path)
	write := SpecialModes && r.chance(50)
	desc := fmt.Sprintf("probe as uid %d %q", r.probeUID, shortPath(path))
	if write {
		desc += " (write)"
	}
	if create != "" {
		desc += fmt.Sprintf(" (create %q)", shortPath(create))
	}
	r.do("probe", desc, func(s int) res {
		var out []string
		var data []byte
		add := func(what string, err error) bool {
			out = append(out, what+"="+fromErr(err).shortErr())
			return err == nil
		}
		p := r.p(s, path)
		if err := asUser(r.probeUID, r.probeUID, func() {
			var st unix.Stat_t
			if add("stat", retry(func() error { return unix.Stat(p, &st) })) {
				out[len(out)-1] += ":" + typeChar(st.Mode)
			}
			for _, m := range []struct {
				name string
				bit  uint32
			}{{"R", unix.R_OK}, {"W", unix.W_OK}, {"X", unix.X_OK}} {
				add("access"+m.name, unix.Access(p, m.bit))
			}
			if special != unix.S_IFCHR && special != unix.S_IFBLK {
				fd, err := retryN(func() (int, error) { return unix.Open(p, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0) })
				if add("openR", err) {
					if st.Mode&unix.S_IFMT == unix.S_IFDIR {
						ents, errno := readDir(p)
						names := make([]string, len(ents))
						for i, e := range ents {
							names[i] = shortPath(e.name)
						}
						out = append(out, "list="+res{errno: errno}.shortErr()+"["+strings.Join(names, " ")+"]")
					} else if st.Mode&unix.S_IFMT == unix.S_IFREG {
						buf := make([]byte, 256)
						n, err := retryN(func() (int, error) { return unix.Pread(fd, buf, 0) })
						if add("read", err) {
							data = buf[:n]
						}
					}
					unix.Close(fd)
				}
				fd, err = retryN(func() (int, error) { return unix.Open(p, unix.O_WRONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0) })
				if add("openW", err) {
					if write && st.Mode&unix.S_IFMT == unix.S_IFREG {
						_, err := retryN(func() (int, error) { return unix.Pwrite(fd, []byte("x"), 0) })
						add("write", err)
						var wst unix.Stat_t
						if unix.Fstat(fd, &wst) == nil {
							out = append(out, fmt.Sprintf("mode=%04o", wst.Mode&0o7777))
						}
					}
					unix.Close(fd)
				}
			}
			if create != "" {
				fd, err := retryN(func() (int, error) {
					return unix.Open(p+"/"+create, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
				})
				if add("create", err) {
					var cst unix.Stat_t
					if unix.Fstat(fd, &cst) == nil {
						out[len(out)-1] += fmt.Sprintf(":%s:%d:%d", statVal(&cst), cst.Uid, cst.Gid)
					}
					unix.Close(fd)
				}
			}
		}); err != nil {
			r.t.Fatalf("posixdiff: switching to uid %d: %v", r.probeUID, err)
		}
		return res{val: strings.Join(out, " "), data: data}
	})
}

// opUnlinkOpen unlinks a file while a descriptor still holds it, creates
// files (which may reuse a freed inode), then uses the descriptor: fstat
// (nlink 0), read, write and read back. With OPathUnlink the descriptor
// is sometimes an O_PATH one, read through a /proc/self/fd reopen.
func (r *runner) opUnlinkOpen() {
	path, ok := r.existing(unix.S_IFREG)
	if !ok {
		r.opCreate()
		return
	}
	flags := unix.O_RDWR
	if OPathUnlink && r.chance(50) {
		flags = unix.O_PATH
	}
	var fds [2]int
	ra, _ := r.do("unlink-open", fmt.Sprintf("unlink-open: open %q %s", shortPath(path), flagStr(flags)), func(s int) res {
		fd, err := retryN(func() (int, error) { return unix.Open(r.p(s, path), flags|unix.O_CLOEXEC, 0) })
		if err != nil {
			return fromErr(err)
		}
		fds[s] = fd
		r.fds[s][fd] = true
		return res{}
	})
	if ra.errno != 0 {
		return
	}
	defer r.do("close", fmt.Sprintf("unlink-open: close %q", shortPath(path)), func(s int) res {
		err := unix.Close(fds[s])
		delete(r.fds[s], fds[s])
		return fromErr(err)
	})
	r.do("unlink", fmt.Sprintf("unlink-open: unlink %q", shortPath(path)), func(s int) res {
		return fromErr(retry(func() error { return unix.Unlink(r.p(s, path)) }))
	})
	for range 1 + r.rng.IntN(3) {
		np := r.newPath()
		if r.specialType(np) != 0 {
			continue
		}
		buf := r.bytes(1 + r.rng.IntN(8192))
		r.do("create", fmt.Sprintf("unlink-open: write new %q len=%d", shortPath(np), len(buf)), func(s int) res {
			fd, err := retryN(func() (int, error) {
				return unix.Open(r.p(s, np), unix.O_CREAT|unix.O_WRONLY|unix.O_TRUNC|unix.O_CLOEXEC, 0o644)
			})
			if err != nil {
				return fromErr(err)
			}
			defer unix.Close(fd)
			return nRes(retryN(func() (int, error) { return unix.Write(fd, buf) }))
		})
	}
	r.do("fstat", fmt.Sprintf("unlink-open: fstat %q", shortPath(path)), func(s int) res {
		var st unix.Stat_t
		if err := retry(func() error { return unix.Fstat(fds[s], &st) }); err != nil {
			return fromErr(err)
		}
		return okRes(statVal(&st))
	})
	size := r.fstatSize(fds[0])
	rfd := fds
	if flags == unix.O_PATH {
		ra, _ := r.do("open", fmt.Sprintf("unlink-open: reopen %q via /proc/self/fd", shortPath(path)), func(s int) res {
			fd, err := retryN(func() (int, error) {
				return unix.Open("/proc/self/fd/"+strconv.Itoa(fds[s]), unix.O_RDWR|unix.O_CLOEXEC, 0)
			})
			if err != nil {
				return fromErr(err)
			}
			rfd[s] = fd
			r.fds[s][fd] = true
			return res{}
		})
		if ra.errno != 0 {
			return
		}
		defer r.do("close", fmt.Sprintf("unlink-open: close reopened %q", shortPath(path)), func(s int) res {
			err := unix.Close(rfd[s])
			delete(r.fds[s], rfd[s])
			return fromErr(err)
		})
	}
	readBack := func(what string, off int64, n int) {
		r.do("pread", fmt.Sprintf("unlink-open: %s pread %q off=%d len=%d", what, shortPath(path), off, n), func(s int) res {
			buf := make([]byte, n)
			got, err := retryN(func() (int, error) { return unix.Pread(rfd[s], buf, off) })
			x := nRes(got, err)
			if err == nil {
				x.data = buf[:got]
			}
			return x
		})
	}
	readBack("old", r.pickOffset(size, 1<<16), 1<<16)
	buf := r.bytes(1 + r.rng.IntN(16<<10))
	off := r.pickOffset(size, len(buf))
	r.do("pwrite", fmt.Sprintf("unlink-open: pwrite %q off=%d len=%d", shortPath(path), off, len(buf)), func(s int) res {
		return r.withSize(nRes(retryN(func() (int, error) { return unix.Pwrite(rfd[s], buf, off) })), rfd[s])
	})
	readBack("new", max(off, 0), len(buf))
}

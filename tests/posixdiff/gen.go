package posixdiff

import (
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
)

type opDef struct {
	name   string
	weight int
	run    func(r *runner)
}

var opTable = []opDef{
	{"create", 8, (*runner).opCreate},
	{"open", 6, (*runner).opOpen},
	{"close", 4, (*runner).opClose},
	{"pwrite", 10, (*runner).opPwrite},
	{"write", 5, (*runner).opWrite},
	{"pread", 7, (*runner).opPread},
	{"read", 3, (*runner).opRead},
	{"lseek", 2, (*runner).opLseek},
	{"truncate", 3, (*runner).opTruncate},
	{"ftruncate", 3, (*runner).opFtruncate},
	{"fallocate", 3, (*runner).opFallocate},
	{"rename", 8, (*runner).opRename},
	{"link", 3, (*runner).opLink},
	{"unlink", 4, (*runner).opUnlink},
	{"symlink", 3, (*runner).opSymlink},
	{"readlink", 2, (*runner).opReadlink},
	{"mkdir", 4, (*runner).opMkdir},
	{"rmdir", 3, (*runner).opRmdir},
	{"chmod", 2, (*runner).opChmod},
	{"fchmod", 1, (*runner).opFchmod},
	{"setxattr", 3, (*runner).opSetxattr},
	{"getxattr", 2, (*runner).opGetxattr},
	{"listxattr", 2, (*runner).opListxattr},
	{"removexattr", 2, (*runner).opRemovexattr},
	{"mmap", 2, (*runner).opMmap},
	{"fsync", 2, (*runner).opFsync},
	{"stat", 4, (*runner).opStat},
	{"fstat", 2, (*runner).opFstat},
	{"readdir", 3, (*runner).opReaddir},
	{"mknod", 3, (*runner).opMknod},
	{"chown", 2, (*runner).opChown},
	{"probe", 3, (*runner).opProbe},
	{"unlink-open", 2, (*runner).opUnlinkOpen},
	{"rmtree", 0, (*runner).opRmtree}, // weight set dynamically when the tree is full
}

// step performs one random operation.
func (r *runner) step() {
	full := len(r.entries) >= maxEntries
	total := 0
	weights := make([]int, len(opTable))
	for i, o := range opTable {
		w := o.weight
		if r.skip[o.name] || !r.enabled(o.name) {
			w = 0
		}
		if full {
			switch o.name {
			case "unlink", "rmdir":
				w *= 3
			case "rmtree":
				w = 2
			}
		}
		weights[i] = w
		total += w
	}
	n := r.rng.IntN(total)
	for i, w := range weights {
		if n < w {
			opTable[i].run(r)
			return
		}
		n -= w
	}
}

// ---------------------------------------------------------------------------
// Random choices

func (r *runner) chance(pct int) bool { return r.rng.IntN(100) < pct }

func (r *runner) randName() string {
	switch n := r.rng.IntN(100); {
	case n < 3:
		return name255
	case n < 5:
		return name256
	default:
		return baseNames[r.rng.IntN(len(baseNames))]
	}
}

// existing returns a random existing non-root path of one of types (any
// type if none given).
func (r *runner) existing(types ...uint32) (string, bool) {
	cands := r.entries
	if len(types) > 0 {
		cands = nil
		for _, t := range types {
			cands = append(cands, r.byType[t]...)
		}
	}
	if len(cands) == 0 {
		return "", false
	}
	return cands[r.rng.IntN(len(cands))].rel, true
}

func (r *runner) typeOf(rel string) uint32 {
	for _, e := range r.entries {
		if e.rel == rel {
			return e.typ
		}
	}
	return 0
}

// parentDir returns a random directory (possibly the root) in which new
// entries may be created, occasionally a symlink (which may point to a
// directory).
func (r *runner) parentDir() string {
	if r.chance(5) {
		if l, ok := r.existing(unix.S_IFLNK); ok {
			return l
		}
	}
	var cands []string
	for _, d := range r.dirs {
		if d.depth < maxDirDepth {
			cands = append(cands, d.rel)
		}
	}
	return cands[r.rng.IntN(len(cands))]
}

func (r *runner) newPath() string { return join(r.parentDir(), r.randName()) }

// badPath returns a path that is likely invalid in some way.
func (r *runner) badPath() string {
	switch r.rng.IntN(5) {
	case 0: // missing (or existing) parent
		return join(r.newPath(), r.randName())
	case 1: // regular file used as a directory: ENOTDIR
		if f, ok := r.existing(unix.S_IFREG); ok {
			return f + "/" + r.randName()
		}
	case 2: // trailing slash
		if e, ok := r.existing(); ok {
			return e + "/"
		}
	case 3: // "." as the last component
		d := r.dirs[r.rng.IntN(len(r.dirs))]
		return join(d.rel, ".")
	}
	return join(r.parentDir(), name256) // ENAMETOOLONG
}

// pick returns an existing path of one of types with probability pct,
// otherwise a mix of existing, new and invalid paths. Never the root.
func (r *runner) pick(pct int, types ...uint32) string {
	if r.chance(pct) {
		if p, ok := r.existing(types...); ok {
			return p
		}
	}
	switch n := r.rng.IntN(100); {
	case n < 45:
		if p, ok := r.existing(); ok {
			return p
		}
		return r.newPath()
	case n < 80:
		return r.newPath()
	default:
		return r.badPath()
	}
}

// pickNew returns a path for an operation that creates a name.
func (r *runner) pickNew() string {
	newPct, existingPct := 65, 22
	if len(r.entries) >= maxEntries { // mostly existing names once the tree is full
		newPct, existingPct = 15, 70
	}
	switch n := r.rng.IntN(100); {
	case n < newPct:
		return r.newPath()
	case n < newPct+existingPct:
		if p, ok := r.existing(); ok {
			return p
		}
		return r.newPath()
	default:
		return r.badPath()
	}
}

func (r *runner) pickHandle() *handle {
	if len(r.handles) == 0 {
		return nil
	}
	return r.handles[r.rng.IntN(len(r.handles))]
}

// pickHandleFor prefers (85%) a handle opened with the given access
// (unix.O_WRONLY: writable, unix.O_RDONLY: readable), so that most data
// operations do not just fail with EBADF.
func (r *runner) pickHandleFor(acc int) *handle {
	if r.chance(85) {
		var cands []*handle
		for _, h := range r.handles {
			a := h.flags & unix.O_ACCMODE
			if a == unix.O_RDWR || a == acc {
				cands = append(cands, h)
			}
		}
		if len(cands) > 0 {
			return cands[r.rng.IntN(len(cands))]
		}
	}
	return r.pickHandle()
}

func (r *runner) writeSize() int {
	switch n := r.rng.IntN(100); {
	case n < 3:
		return 0
	case n < 40:
		return 1 + r.rng.IntN(512)
	case n < 65:
		return 512 + r.rng.IntN(8<<10)
	case n < 80:
		return 8<<10 + r.rng.IntN(56<<10)
	case n < 92:
		return 64<<10 + r.rng.IntN(maxWrite-64<<10+1)
	default:
		sizes := []int{4096, 8192, 65536, 131072, maxWrite}
		return sizes[r.rng.IntN(len(sizes))]
	}
}

func (r *runner) readSize() int {
	switch n := r.rng.IntN(100); {
	case n < 3:
		return 0
	case n < 50:
		return 1 + r.rng.IntN(4096)
	case n < 80:
		return 1 + r.rng.IntN(64<<10)
	default:
		return 1 + r.rng.IntN(maxWrite)
	}
}

// pickOffset chooses an offset for an n-byte access to a file of size bytes:
// inside, at EOF, just past EOF, far past EOF (holes), page aligned, and
// rarely negative (EINVAL). off+n stays below maxFileSize.
func (r *runner) pickOffset(size int64, n int) int64 {
	var off int64
	switch k := r.rng.IntN(100); {
	case k < 10:
		off = 0
	case k < 30:
		off = size
	case k < 40:
		off = size + 1 + r.rng.Int64N(5000)
	case k < 48:
		off = size + r.rng.Int64N(2<<20)
	case k < 58:
		off = r.rng.Int64N(size+1) &^ 4095
	case k < 59:
		return -1 - r.rng.Int64N(10)
	default:
		off = r.rng.Int64N(size + 1)
	}
	if off+int64(n) > maxFileSize {
		off = max(0, maxFileSize-int64(n)-r.rng.Int64N(4096))
	}
	return off
}

// newSize chooses a truncate length for a file of size bytes.
func (r *runner) newSize(size int64) int64 {
	var l int64
	switch k := r.rng.IntN(100); {
	case k < 15:
		l = 0
	case k < 45:
		l = r.rng.Int64N(size + 1)
	case k < 75:
		l = size + 1 + r.rng.Int64N(1<<20)
	case k < 80:
		l = size
	case k < 90:
		l = r.rng.Int64N(maxFileSize) &^ 4095
	case k < 92:
		return -1
	default:
		l = r.rng.Int64N(maxFileSize)
	}
	return min(l, maxFileSize)
}

// bytes returns n bytes of data: random, zeros or a repeated byte.
func (r *runner) bytes(n int) []byte {
	buf := make([]byte, n)
	switch r.rng.IntN(10) {
	case 0: // zeros
	case 1:
		b := byte(r.rng.IntN(256))
		for i := range buf {
			buf[i] = b
		}
	default:
		_, _ = r.data.Read(buf)
	}
	return buf
}

// symTarget returns a symlink target for a link named name. Targets are
// relative and never contain "..": whatever they resolve to stays inside the
// tree, on both sides.
func (r *runner) symTarget(name string) string {
	switch k := r.rng.IntN(100); {
	case k < 35:
		return baseNames[r.rng.IntN(len(baseNames))]
	case k < 55:
		return baseNames[r.rng.IntN(len(baseNames))] + "/" + baseNames[r.rng.IntN(len(baseNames))]
	case k < 65:
		if p, ok := r.existing(); ok {
			return p
		}
		return "x"
	case k < 70:
		return "."
	case k < 75:
		return name // points to itself: ELOOP when followed
	case k < 80:
		return name255
	case k < 85:
		return strings.Repeat("d/", 500) + "x"
	case k < 86:
		return strings.Repeat("y", 4095) // longest legal target
	case k < 87:
		return "" // ENOENT
	default:
		return "missing-" + baseNames[r.rng.IntN(len(baseNames))]
	}
}

func lastElem(p string) string {
	p = strings.TrimRight(p, "/")
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[i+1:]
	}
	return p
}

// shortPath abbreviates the long test names in logs.
func shortPath(p string) string {
	p = strings.ReplaceAll(p, name256, "<M*256>")
	p = strings.ReplaceAll(p, name255, "<L*255>")
	return p
}

func shortStr(s string) string {
	s = shortPath(s)
	if len(s) > 80 {
		return fmt.Sprintf("%s...(%d bytes)", s[:40], len(s))
	}
	return s
}

func flagStr(flags int) string {
	var parts []string
	switch flags & unix.O_ACCMODE {
	case unix.O_RDONLY:
		parts = append(parts, "O_RDONLY")
	case unix.O_WRONLY:
		parts = append(parts, "O_WRONLY")
	case unix.O_RDWR:
		parts = append(parts, "O_RDWR")
	}
	for _, f := range []struct {
		bit  int
		name string
	}{
		{unix.O_CREAT, "O_CREAT"}, {unix.O_EXCL, "O_EXCL"}, {unix.O_TRUNC, "O_TRUNC"},
		{unix.O_APPEND, "O_APPEND"}, {unix.O_NOFOLLOW, "O_NOFOLLOW"}, {unix.O_DIRECTORY, "O_DIRECTORY"},
		{unix.O_NONBLOCK, "O_NONBLOCK"}, {unix.O_PATH, "O_PATH"},
	} {
		if flags&f.bit != 0 {
			parts = append(parts, f.name)
		}
	}
	return strings.Join(parts, "|")
}

func nRes(n int, err error) res {
	if err != nil {
		return fromErr(err)
	}
	return okRes(fmt.Sprintf("n=%d", n))
}

// withSize appends the file size (fstat) to a result, to catch size
// divergences right at the operation that caused them.
func (r *runner) withSize(x res, fd int) res {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		x.val += " fstat:" + errName(toErrno(err))
	} else if st.Mode&unix.S_IFMT == unix.S_IFREG {
		x.val += fmt.Sprintf(" size=%d", st.Size)
	}
	x.val = strings.TrimSpace(x.val)
	return x
}

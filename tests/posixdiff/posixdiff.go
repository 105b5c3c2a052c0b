// Package posixdiff is a differential POSIX tester: it generates a random,
// seed-determined sequence of file system operations and runs each one in
// lockstep on two directory trees, a reference (normally tmpfs) and the file
// system under test. Every return value and errno must match, and the whole
// trees (names, types, sizes, permission bits, link counts, hard-link
// groups, symlink targets, file contents and user.* xattrs) are compared
// periodically and at the end.
//
// The namespace is kept small (about 30 names, directories up to 3 levels)
// so that operations collide often: creates over existing names, renames
// over files and (non-)empty directories, operations on files used as
// directories, names of 255 and 256 bytes, unlinked files that are still
// open, and so on.
//
// Ignored on purpose: atime/mtime/ctime, inode numbers (but hard-link
// groups are compared), st_blocks, st_dev, directory sizes, and the
// number of "security.*"/"trusted.*"/"system.*" xattrs.
package posixdiff

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Tunables of the generator.
const (
	maxEntries      = 30      // soft limit on the number of names in a tree
	maxDirDepth     = 3       // mkdir/create only below this many directory levels
	maxHandles      = 8       // open file handles per side
	maxFileSize     = 4 << 20 // writes, truncates and fallocates stay below this
	maxWrite        = 200 << 10
	maxXattrValue   = 4000
	historyLen      = 50
	quickCheckEvery = 100 // compare tree metadata every this many ops
	fullCheckEvery  = 500 // compare contents and xattrs every this many ops
)

var (
	baseNames  = []string{"a", "b", "c", "d", "e", "f"}
	name255    = strings.Repeat("L", 255) // longest legal name
	name256    = strings.Repeat("M", 256) // ENAMETOOLONG
	xattrNames = []string{"user.a", "user.b", "user.c", "user.d", "user." + strings.Repeat("x", 250)}
	fileModes  = []uint32{0o644, 0o600, 0o666, 0o755, 0o700, 0o640, 0o444, 0o777}
	dirModes   = []uint32{0o755, 0o700, 0o777, 0o750, 0o555}
)

// Run runs nops random operations chosen by seed in lockstep on the
// directories a and b and fails t at the first divergence. a is the
// reference (e.g. a tmpfs directory): the generator looks at a's tree to
// choose paths, so for a given seed the sequence is deterministic as long
// as a behaves deterministically. Both directories must exist and be empty;
// their permissions are set to 0755. Every open descriptor and mapping is
// released before Run returns, also on failure.
//
// The environment variable DNNFS_DIFF_SKIP_OPS (comma-separated operation
// names, see OpNames) disables operations, for triage only.
func Run(t *testing.T, a, b string, seed int64, nops int) {
	t.Helper()
	RunWithOptions(t, a, b, seed, nops, Options{SkipOps: EnvSkipOps()})
}

// Options tune RunWithOptions.
type Options struct {
	// SkipOps lists operation names (see OpNames) never to generate.
	// Meant for triage while a known divergence is being fixed.
	SkipOps []string
	// ProbeUID, if not 0, enables the "probe" operation: accesses as this
	// uid (and gid), which must be able to reach both trees (on FUSE: a
	// mount with allow_other).
	ProbeUID uint32
}

// EnvSkipOps returns the operations DNNFS_DIFF_SKIP_OPS disables.
func EnvSkipOps() []string {
	if s := os.Getenv("DNNFS_DIFF_SKIP_OPS"); s != "" {
		return strings.Split(s, ",")
	}
	return nil
}

// OpNames returns the names of the generated operations.
func OpNames() []string {
	names := make([]string, len(opTable))
	for i, o := range opTable {
		names[i] = o.name
	}
	return names
}

// RunWithOptions is Run with explicit options.
func RunWithOptions(t *testing.T, a, b string, seed int64, nops int, opts Options) {
	t.Helper()
	r := newRunner(t, a, b, seed)
	r.probeUID = opts.ProbeUID
	for _, name := range opts.SkipOps {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		if !slices.Contains(OpNames(), name) {
			t.Fatalf("posixdiff: unknown operation %q in SkipOps (known: %s)", name, strings.Join(OpNames(), ","))
		}
		r.skip[name] = true
	}
	if len(r.skip) > 0 {
		t.Logf("posixdiff: NOT generating operations %v", opts.SkipOps)
	}
	defer r.closeAll()
	r.prepareRoots()
	for r.opNum = 1; r.opNum <= nops; r.opNum++ {
		r.refresh()
		r.step()
		if r.opNum%fullCheckEvery == 0 {
			r.compareTrees(true)
		} else if r.opNum%quickCheckEvery == 0 {
			r.compareTrees(false)
		}
	}
	r.opNum = nops // the final close and compare are reported as part of the last op
	for len(r.handles) > 0 {
		r.closeHandle(0)
	}
	r.compareTrees(true)
	t.Logf("posixdiff seed %d: %d ops OK; time: %s; results: %s", seed, nops, r.timing(), r.summary())
}

// CompareTrees fails t if the trees under a and b differ (names, types, sizes,
// permission bits, link counts, hard-link groups, symlink targets, contents,
// user.* xattrs). Useful after an unmount/remount of the tree under test.
func CompareTrees(t *testing.T, a, b string) {
	t.Helper()
	if diffs := diffTrees(a, b, true); len(diffs) > 0 {
		t.Fatalf("posixdiff: trees %s and %s differ:\n  %s", a, b, strings.Join(diffs, "\n  "))
	}
}

// ---------------------------------------------------------------------------
// Runner state

type handle struct {
	id    int
	fd    [2]int
	path  string // path at open time (for logs)
	flags int
}

type entry struct {
	rel   string
	typ   uint32 // S_IFMT bits
	depth int    // number of path components
}

type runner struct {
	t        *testing.T
	seed     int64
	rng      *rand.Rand
	data     *rand.ChaCha8
	root     [2]string
	handles  []*handle
	nextID   int
	fds      [2]map[int]bool // every fd opened and not yet closed
	maps     [][]byte        // live mappings (released by closeAll)
	opNum    int
	history  []string
	entries  []entry // tree of side a, refreshed before each op
	byType   map[uint32][]entry
	dirs     []entry // directories including the root (rel "")
	stats    map[string]int
	errnos   map[string]int
	skip     map[string]bool
	probeUID uint32                      // 0: no probes as another user
	dur      [2]map[string]time.Duration // time spent per operation name and side
}

func newRunner(t *testing.T, a, b string, seed int64) *runner {
	var key [32]byte
	for i := range 8 {
		key[i] = byte(uint64(seed) >> (8 * i))
	}
	key[8] = 0xd5
	return &runner{
		t:      t,
		seed:   seed,
		rng:    rand.New(rand.NewPCG(uint64(seed), 0x9e3779b97f4a7c15^uint64(seed))),
		data:   rand.NewChaCha8(key),
		root:   [2]string{strings.TrimRight(a, "/"), strings.TrimRight(b, "/")},
		fds:    [2]map[int]bool{{}, {}},
		stats:  map[string]int{},
		errnos: map[string]int{},
		skip:   map[string]bool{},
		dur:    [2]map[string]time.Duration{{}, {}},
	}
}

func (r *runner) prepareRoots() {
	for s := range 2 {
		ents, errno := readDir(r.root[s])
		if errno != 0 {
			r.t.Fatalf("posixdiff: cannot read %s: %v", r.root[s], errno)
		}
		if len(ents) != 0 {
			r.t.Fatalf("posixdiff: %s is not empty", r.root[s])
		}
		if err := unix.Chmod(r.root[s], 0o755); err != nil {
			r.t.Fatalf("posixdiff: chmod %s: %v", r.root[s], err)
		}
	}
}

// closeAll releases every mapping and descriptor (runs on success and on
// failure, so a FUSE mount is never left busy).
func (r *runner) closeAll() {
	for _, m := range r.maps {
		_ = unix.Munmap(m)
	}
	r.maps = nil
	for s := range 2 {
		for fd := range r.fds[s] {
			_ = unix.Close(fd)
		}
		r.fds[s] = map[int]bool{}
	}
	r.handles = nil
}

// p returns the full path of rel on side s. No cleaning: "f/", "d/." and
// similar are passed to the kernel as generated.
func (r *runner) p(s int, rel string) string {
	if rel == "" {
		return r.root[s]
	}
	return r.root[s] + "/" + rel
}

// refresh re-reads side a's tree (cheap: it is the reference, usually tmpfs).
func (r *runner) refresh() {
	r.entries = r.entries[:0]
	r.dirs = append(r.dirs[:0], entry{rel: "", typ: unix.S_IFDIR})
	r.byType = map[uint32][]entry{}
	var walk func(rel string, depth int)
	walk = func(rel string, depth int) {
		ents, errno := readDir(r.p(0, rel))
		if errno != 0 {
			r.t.Fatalf("posixdiff: walking reference %s: %v", r.p(0, rel), errno)
		}
		for _, de := range ents {
			crel := join(rel, de.name)
			var st unix.Stat_t
			if err := unix.Lstat(r.p(0, crel), &st); err != nil {
				r.t.Fatalf("posixdiff: lstat reference %s: %v", r.p(0, crel), err)
			}
			e := entry{rel: crel, typ: st.Mode & unix.S_IFMT, depth: depth + 1}
			r.entries = append(r.entries, e)
			r.byType[e.typ] = append(r.byType[e.typ], e)
			if e.typ == unix.S_IFDIR {
				r.dirs = append(r.dirs, e)
				walk(crel, depth+1)
			}
		}
	}
	walk("", 0)
}

func join(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// ---------------------------------------------------------------------------
// Results, comparison, history

type res struct {
	errno unix.Errno
	val   string // compared, printed
	data  []byte // compared, summarized
}

func (x res) String() string {
	s := "ok"
	if x.errno != 0 {
		s = errName(x.errno)
	}
	if x.val != "" {
		s += " " + x.val
	}
	if x.data != nil {
		s += fmt.Sprintf(" data[%d]", len(x.data))
	}
	return s
}

func errName(e unix.Errno) string {
	if n := unix.ErrnoName(e); n != "" {
		return n
	}
	return fmt.Sprintf("errno(%d)", int(e))
}

func okRes(val string) res  { return res{val: val} }
func fromErr(err error) res { return res{errno: toErrno(err)} }

func toErrno(err error) unix.Errno {
	if err == nil {
		return 0
	}
	var e unix.Errno
	if errors.As(err, &e) {
		return e
	}
	return unix.EIO // not a syscall error; shows up as a divergence if sides differ
}

// do runs f on both sides, records the op in the history and fails the test
// if the results differ.
func (r *runner) do(name, desc string, f func(s int) res) (ra, rb res) {
	r.t.Helper()
	t0 := time.Now()
	ra = f(0)
	t1 := time.Now()
	rb = f(1)
	r.dur[0][name] += t1.Sub(t0)
	r.dur[1][name] += time.Since(t1)
	r.stats[name]++
	r.errnos[name+":"+ra.shortErr()]++
	line := fmt.Sprintf("#%d %s => %s", r.opNum, desc, ra)
	same := ra.errno == rb.errno && ra.val == rb.val && bytes.Equal(ra.data, rb.data)
	if !same {
		line += fmt.Sprintf("  |  B: %s", rb)
	}
	r.record(line)
	if !same {
		r.fail("%s: results differ\n  A (%s): %s\n  B (%s): %s%s", desc, r.root[0], ra, r.root[1], rb, dataDiff(ra.data, rb.data))
	}
	return ra, rb
}

func (x res) shortErr() string {
	if x.errno == 0 {
		return "ok"
	}
	return errName(x.errno)
}

func (r *runner) record(line string) {
	if len(r.history) >= historyLen {
		copy(r.history, r.history[1:])
		r.history = r.history[:historyLen-1]
	}
	r.history = append(r.history, line)
}

func (r *runner) fail(format string, args ...any) {
	r.t.Helper()
	msg := fmt.Sprintf(format, args...)
	r.t.Fatalf("posixdiff DIVERGENCE (seed %d, op #%d): %s\n\nA=%s (reference)\nB=%s\nlast %d ops (=> result on A; B shown only where different):\n  %s\n\nreproduce: seed %d, %s (TestDifferential: DNNFS_DIFF_SEED=%d go test ./tests/posixdiff -run '^TestDifferential$')",
		r.seed, r.opNum, msg, r.root[0], r.root[1], len(r.history), strings.Join(r.history, "\n  "), r.seed, r.t.Name(), r.seed)
}

func dataDiff(a, b []byte) string {
	if bytes.Equal(a, b) || a == nil || b == nil {
		return ""
	}
	n := min(len(a), len(b))
	i := 0
	for i < n && a[i] == b[i] {
		i++
	}
	return fmt.Sprintf("\n  data: lengths %d vs %d, first difference at byte %d (A %s, B %s)",
		len(a), len(b), i, hexAt(a, i), hexAt(b, i))
}

func hexAt(b []byte, i int) string {
	if i >= len(b) {
		return "EOF"
	}
	return fmt.Sprintf("% x", b[i:min(len(b), i+16)])
}

func (r *runner) summary() string {
	keys := make([]string, 0, len(r.errnos))
	for k := range r.errnos {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%d ", k, r.errnos[k])
	}
	return strings.TrimSpace(b.String())
}

// ---------------------------------------------------------------------------
// Syscall wrappers (EINTR is retried: Go's preemption signals can interrupt
// FUSE requests).

func retry(f func() error) error {
	for {
		err := f()
		if err != unix.EINTR {
			return err
		}
	}
}

func retryN(f func() (int, error)) (int, error) {
	for {
		n, err := f()
		if err != unix.EINTR {
			return n, err
		}
	}
}

type dirent struct {
	name string
	typ  uint8
}

// readDir lists a directory with getdents64 (without "." and "..").
func readDir(path string) ([]dirent, unix.Errno) {
	fd, err := retryN(func() (int, error) {
		return unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	})
	if err != nil {
		return nil, toErrno(err)
	}
	defer unix.Close(fd)
	var out []dirent
	buf := make([]byte, 16<<10)
	for {
		n, err := retryN(func() (int, error) { return unix.Getdents(fd, buf) })
		if err != nil {
			return nil, toErrno(err)
		}
		if n <= 0 {
			break
		}
		for off := 0; off < n; {
			// struct linux_dirent64 { u64 ino; s64 off; u16 reclen; u8 type; char name[]; }
			reclen := int(*(*uint16)(unsafe.Pointer(&buf[off+16])))
			typ := buf[off+18]
			nameb := buf[off+19 : off+reclen]
			if i := bytes.IndexByte(nameb, 0); i >= 0 {
				nameb = nameb[:i]
			}
			name := string(nameb)
			if name != "." && name != ".." {
				out = append(out, dirent{name: name, typ: typ})
			}
			off += reclen
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out, 0
}

func typeChar(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return "f"
	case unix.S_IFDIR:
		return "d"
	case unix.S_IFLNK:
		return "l"
	case unix.S_IFIFO:
		return "p"
	case unix.S_IFCHR:
		return "c"
	case unix.S_IFBLK:
		return "b"
	case unix.S_IFSOCK:
		return "s"
	default:
		return fmt.Sprintf("?%o", mode&unix.S_IFMT)
	}
}

func dtChar(t uint8) string {
	switch t {
	case unix.DT_REG:
		return "f"
	case unix.DT_DIR:
		return "d"
	case unix.DT_LNK:
		return "l"
	case unix.DT_FIFO:
		return "p"
	case unix.DT_CHR:
		return "c"
	case unix.DT_BLK:
		return "b"
	case unix.DT_SOCK:
		return "s"
	case unix.DT_UNKNOWN:
		return "?"
	default:
		return fmt.Sprintf("t%d", t)
	}
}

// statVal is the comparable part of a stat result.
func statVal(st *unix.Stat_t) string {
	s := fmt.Sprintf("%s mode=%04o nlink=%d", typeChar(st.Mode), st.Mode&0o7777, st.Nlink)
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
	case unix.S_IFCHR, unix.S_IFBLK:
		s += fmt.Sprintf(" rdev=%d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev))
	default:
		s += fmt.Sprintf(" size=%d", st.Size)
	}
	return s
}

func (r *runner) fstatSize(fd int) int64 {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0
	}
	return st.Size
}

func (r *runner) lstatSizeA(rel string) int64 {
	var st unix.Stat_t
	if err := unix.Stat(r.p(0, rel), &st); err != nil {
		return 0
	}
	return st.Size
}

// timing reports the operations that took most time on each side.
func (r *runner) timing() string {
	var b strings.Builder
	for s, label := range []string{"A", "B"} {
		type kv struct {
			k string
			d time.Duration
		}
		var all []kv
		var total time.Duration
		for k, d := range r.dur[s] {
			all = append(all, kv{k, d})
			total += d
		}
		sort.Slice(all, func(i, j int) bool { return all[i].d > all[j].d })
		fmt.Fprintf(&b, "%s total %v:", label, total.Round(time.Millisecond))
		for _, x := range all[:min(len(all), 6)] {
			fmt.Fprintf(&b, " %s=%v", x.k, x.d.Round(time.Millisecond))
		}
		b.WriteString("; ")
	}
	return strings.TrimSuffix(b.String(), "; ")
}

package posixdiff

import (
	"bytes"
	"fmt"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

const maxReportedDiffs = 20

type node struct {
	mode   uint32
	nlink  uint64
	size   int64
	ino    uint64
	uid    uint32
	gid    uint32
	rdev   uint64 // device nodes only
	target string
	group  string // names sharing this inode (hard links), filled for non-directories
}

// snapshot lstat()s every name under root (root itself as "").
func snapshot(root string) (map[string]*node, error) {
	nodes := map[string]*node{}
	var walk func(rel string) error
	walk = func(rel string) error {
		full := root
		if rel != "" {
			full = root + "/" + rel
		}
		var st unix.Stat_t
		if err := retry(func() error { return unix.Lstat(full, &st) }); err != nil {
			return fmt.Errorf("lstat %s: %w", full, err)
		}
		n := &node{mode: st.Mode, nlink: uint64(st.Nlink), size: st.Size, ino: st.Ino, uid: st.Uid, gid: st.Gid}
		if t := st.Mode & unix.S_IFMT; t == unix.S_IFCHR || t == unix.S_IFBLK {
			n.rdev = st.Rdev
		}
		nodes[rel] = n
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFLNK:
			buf := make([]byte, 8192)
			k, err := retryN(func() (int, error) { return unix.Readlink(full, buf) })
			if err != nil {
				return fmt.Errorf("readlink %s: %w", full, err)
			}
			n.target = string(buf[:k])
		case unix.S_IFDIR:
			ents, errno := readDir(full)
			if errno != 0 {
				return fmt.Errorf("readdir %s: %w", full, errno)
			}
			for _, e := range ents {
				if err := walk(join(rel, e.name)); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(""); err != nil {
		return nil, err
	}
	// Hard-link groups: compared instead of inode numbers.
	groups := map[uint64][]string{}
	for rel, n := range nodes {
		if n.mode&unix.S_IFMT != unix.S_IFDIR {
			groups[n.ino] = append(groups[n.ino], rel)
		}
	}
	for _, g := range groups {
		sort.Strings(g)
		s := strings.Join(g, ", ")
		for _, rel := range g {
			nodes[rel].group = s
		}
	}
	return nodes, nil
}

// diffTrees compares the trees under a and b and returns a description of
// each difference (at most maxReportedDiffs). With full, file contents and
// user.* xattrs are compared too.
func diffTrees(a, b string, full bool) []string {
	na, err := snapshot(a)
	if err != nil {
		return []string{"walking A: " + err.Error()}
	}
	nb, err := snapshot(b)
	if err != nil {
		return []string{"walking B: " + err.Error()}
	}
	names := map[string]bool{}
	for k := range na {
		names[k] = true
	}
	for k := range nb {
		names[k] = true
	}
	sorted := make([]string, 0, len(names))
	for k := range names {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	var diffs []string
	for _, rel := range sorted {
		show := fmt.Sprintf("%q", shortPath(rel))
		if rel == "" {
			show = "(root)"
		}
		diffs = append(diffs, diffNode(show, na[rel], nb[rel])...)
		if full && na[rel] != nil && nb[rel] != nil && na[rel].mode&unix.S_IFMT == nb[rel].mode&unix.S_IFMT {
			pa, pb := a, b
			if rel != "" {
				pa, pb = a+"/"+rel, b+"/"+rel
			}
			diffs = append(diffs, diffData(show, pa, pb, na[rel], nb[rel])...)
		}
		if len(diffs) >= maxReportedDiffs {
			return diffs[:maxReportedDiffs]
		}
	}
	return diffs
}

// diffNode describes how the metadata of one name differs between the
// trees (x in A, y in B; nil where the name is missing).
func diffNode(show string, x, y *node) []string {
	var d []string
	add := func(format string, args ...any) { d = append(d, show+": "+fmt.Sprintf(format, args...)) }
	switch {
	case x == nil:
		add("only in B (%s)", typeChar(y.mode))
		return d
	case y == nil:
		add("only in A (%s)", typeChar(x.mode))
		return d
	case x.mode&unix.S_IFMT != y.mode&unix.S_IFMT:
		add("type A=%s B=%s", typeChar(x.mode), typeChar(y.mode))
		return d
	}
	typ := x.mode & unix.S_IFMT
	if x.mode&0o7777 != y.mode&0o7777 {
		add("mode A=%04o B=%04o", x.mode&0o7777, y.mode&0o7777)
	}
	if x.uid != y.uid || x.gid != y.gid {
		add("owner A=%d:%d B=%d:%d", x.uid, x.gid, y.uid, y.gid)
	}
	if x.rdev != y.rdev {
		add("rdev A=%#x B=%#x", x.rdev, y.rdev)
	}
	if x.nlink != y.nlink {
		add("nlink A=%d B=%d", x.nlink, y.nlink)
	}
	if typ != unix.S_IFDIR && x.size != y.size {
		add("size A=%d B=%d", x.size, y.size)
	}
	if x.group != y.group {
		add("hard-link group A={%s} B={%s}", shortPath(x.group), shortPath(y.group))
	}
	if typ == unix.S_IFLNK && x.target != y.target {
		add("symlink target A=%q B=%q", shortStr(x.target), shortStr(y.target))
	}
	return d
}

// diffData describes how the contents and user.* xattrs of one name of
// the same type differ between the trees (at paths pa and pb).
func diffData(show, pa, pb string, x, y *node) []string {
	var d []string
	typ := x.mode & unix.S_IFMT
	if typ == unix.S_IFREG && x.size == y.size {
		if s := diffContents(pa, pb); s != "" {
			d = append(d, show+": "+s)
		}
	}
	if typ == unix.S_IFREG || typ == unix.S_IFDIR {
		if s := diffXattrs(pa, pb); s != "" {
			d = append(d, show+": "+s)
		}
	}
	return d
}

func diffContents(a, b string) string {
	fa, err := retryN(func() (int, error) { return unix.Open(a, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0) })
	if err != nil {
		return "open A: " + err.Error()
	}
	defer unix.Close(fa)
	fb, err := retryN(func() (int, error) { return unix.Open(b, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0) })
	if err != nil {
		return "open B: " + err.Error()
	}
	defer unix.Close(fb)
	const chunk = 1 << 20
	ba, bb := make([]byte, chunk), make([]byte, chunk)
	for off := int64(0); ; off += chunk {
		na, errA := readFull(fa, ba, off)
		nb, errB := readFull(fb, bb, off)
		if errA != nil || errB != nil {
			return fmt.Sprintf("reading at %d: A: %v, B: %v", off, errA, errB)
		}
		if na != nb || !bytes.Equal(ba[:na], bb[:nb]) {
			i := 0
			for i < min(na, nb) && ba[i] == bb[i] {
				i++
			}
			return fmt.Sprintf("contents differ at offset %d (A: % x..., B: % x...; read %d vs %d bytes)",
				off+int64(i), ba[i:min(na, i+16)], bb[i:min(nb, i+16)], na, nb)
		}
		if na < chunk {
			return ""
		}
	}
}

func readFull(fd int, buf []byte, off int64) (int, error) {
	n := 0
	for n < len(buf) {
		k, err := retryN(func() (int, error) { return unix.Pread(fd, buf[n:], off+int64(n)) })
		if err != nil {
			return n, err
		}
		if k == 0 {
			break
		}
		n += k
	}
	return n, nil
}

func diffXattrs(a, b string) string {
	xa, errA := userXattrs(a)
	xb, errB := userXattrs(b)
	if errA != nil || errB != nil {
		if fmt.Sprint(errA) == fmt.Sprint(errB) {
			return ""
		}
		return fmt.Sprintf("listing xattrs: A: %v, B: %v", errA, errB)
	}
	var diffs []string
	for _, name := range unionKeys(xa, xb) {
		va, okA := xa[name]
		vb, okB := xb[name]
		switch {
		case !okA:
			diffs = append(diffs, fmt.Sprintf("xattr %s only in B", shortStr(name)))
		case !okB:
			diffs = append(diffs, fmt.Sprintf("xattr %s only in A", shortStr(name)))
		case va != vb:
			diffs = append(diffs, fmt.Sprintf("xattr %s value differs (%d vs %d bytes)", shortStr(name), len(va), len(vb)))
		}
	}
	return strings.Join(diffs, "; ")
}

func userXattrs(path string) (map[string]string, error) {
	names, errno := listUserXattrs(path)
	if errno != 0 {
		return nil, errno
	}
	m := map[string]string{}
	buf := make([]byte, 64<<10)
	for _, name := range names {
		n, err := retryN(func() (int, error) { return unix.Getxattr(path, name, buf) })
		if err != nil {
			return nil, fmt.Errorf("getxattr %s: %w", name, err)
		}
		m[name] = string(buf[:n])
	}
	return m, nil
}

func unionKeys(a, b map[string]string) []string {
	seen := map[string]bool{}
	for k := range a {
		seen[k] = true
	}
	for k := range b {
		seen[k] = true
	}
	keys := make([]string, 0, len(seen))
	for k := range seen {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// compareTrees fails the run if the trees differ.
func (r *runner) compareTrees(full bool) {
	r.t.Helper()
	t0 := time.Now()
	defer func() { r.dur[1]["(tree compare)"] += time.Since(t0) }()
	if diffs := diffTrees(r.root[0], r.root[1], full); len(diffs) > 0 {
		kind := "metadata"
		if full {
			kind = "full"
		}
		r.fail("%s tree comparison found differences:\n  %s", kind, strings.Join(diffs, "\n  "))
	}
}

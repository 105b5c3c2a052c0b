package crashimage_test

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/dnnfs/dnnfs/core"
	"github.com/dnnfs/dnnfs/format"
)

// node is the logical state of one name in the tree, as the pool API shows
// it. Times are left out: the durability contract does not promise them
// (README "Durability contract", rule 6).
type node struct {
	Type   byte // 'd', 'f' or 'l'
	Ino    core.Ino
	Mode   uint32 // type and permission bits
	UID    uint32
	GID    uint32
	Nlink  uint32
	Rdev   uint32 // device nodes
	Size   uint64
	Blocks uint64
	Target string            // symlinks
	Xattrs map[string]string // name -> value
	Data   []byte            // regular files: the whole content
}

// tree maps a path ("/" for the root, "/a/b" below it) to its node.
type tree map[string]*node

func typeOf(mode uint32) byte {
	switch mode & format.ModeType {
	case format.ModeDir:
		return 'd'
	case format.ModeLnk:
		return 'l'
	case format.ModeReg:
		return 'f'
	case format.ModeChr:
		return 'c'
	case format.ModeBlk:
		return 'b'
	case format.ModeFifo:
		return 'p'
	case format.ModeSock:
		return 's'
	}
	return '?'
}

// snapshot walks the whole tree of p through the pool API: every entry, every
// attribute, every byte of every file. It also checks the DRAM index for
// self-consistency (entry types, Lookup, Parent).
func snapshot(p *core.FS) (tree, error) {
	t := tree{}
	seenDir := map[core.Ino]string{}
	var walk func(path string, in *core.Inode, depth int) error
	walk = func(path string, in *core.Inode, depth int) error {
		if depth > 64 {
			return fmt.Errorf("%s: directory nesting deeper than 64 (loop?)", path)
		}
		a := in.Attr()
		n := &node{Type: typeOf(a.Mode), Ino: a.Ino, Mode: a.Mode, UID: a.UID, GID: a.GID,
			Nlink: a.Nlink, Rdev: a.Rdev, Size: a.Size, Blocks: a.Blocks}
		if names := p.Listxattr(in); len(names) > 0 {
			n.Xattrs = map[string]string{}
			for _, name := range names {
				v, err := p.Getxattr(in, name)
				if err != nil {
					return fmt.Errorf("%s: getxattr %q: %v", path, name, err)
				}
				n.Xattrs[name] = string(v)
			}
		}
		t[path] = n
		switch n.Type {
		case 'f':
			if in.IsTable() { // its rows are on the SSD tier: ext_test.go checks its descriptor
				n.Type = 't'
				break
			}
			n.Data = make([]byte, a.Size)
			k, err := p.ReadAt(in, n.Data, 0)
			if err != nil {
				return fmt.Errorf("%s: read: %v", path, err)
			}
			if uint64(k) != a.Size {
				return fmt.Errorf("%s: read %d bytes of %d", path, k, a.Size)
			}
		case 'l':
			s, err := p.Readlink(in)
			if err != nil {
				return fmt.Errorf("%s: readlink: %v", path, err)
			}
			n.Target = s
		case 'd':
			if other, dup := seenDir[a.Ino]; dup {
				return fmt.Errorf("%s: directory inode %d also reached as %s", path, a.Ino, other)
			}
			seenDir[a.Ino] = path
			for pos := uint64(0); ; {
				e, ok := p.ReadDir(in, pos)
				if !ok {
					break
				}
				if e.Next <= pos {
					return fmt.Errorf("%s: ReadDir(%d) returned next position %d", path, pos, e.Next)
				}
				pos = e.Next
				child := p.Inode(e.Ino)
				cpath := path + "/" + e.Name
				if path == "/" {
					cpath = "/" + e.Name
				}
				if child == nil {
					return fmt.Errorf("%s: entry names inode %d, which is not live", cpath, e.Ino)
				}
				if got, err := p.Lookup(in, e.Name); err != nil || got != child {
					return fmt.Errorf("%s: Lookup disagrees with ReadDir (err %v)", cpath, err)
				}
				cm := child.Mode()
				if e.Mode&format.ModeType != cm&format.ModeType {
					return fmt.Errorf("%s: entry type %o, inode type %o", cpath, e.Mode&format.ModeType, cm&format.ModeType)
				}
				if typeOf(cm) == 'd' {
					if par := p.Parent(child); par != in {
						return fmt.Errorf("%s: Parent() is not the directory holding the entry", cpath)
					}
				}
				if err := walk(cpath, child, depth+1); err != nil {
					return err
				}
			}
		case 'c', 'b', 'p', 's':
		default:
			return fmt.Errorf("%s: unexpected mode %o", path, a.Mode)
		}
		return nil
	}
	if err := walk("/", p.Root(), 0); err != nil {
		return nil, err
	}
	return t, nil
}

// span is a byte range [Off, End) of a file.
type span struct{ Off, End uint64 }

// spans is a sorted list of disjoint byte ranges.
type spans []span

func (s spans) add(off, end uint64) spans {
	if off >= end {
		return s
	}
	var out spans
	for _, r := range s {
		if r.End < off || r.Off > end {
			out = append(out, r)
			continue
		}
		off, end = min(off, r.Off), max(end, r.End)
	}
	out = append(out, span{off, end})
	sort.Slice(out, func(i, j int) bool { return out[i].Off < out[j].Off })
	return out
}

func (s spans) remove(off, end uint64) spans {
	var out spans
	for _, r := range s {
		if r.End <= off || r.Off >= end {
			out = append(out, r)
			continue
		}
		if r.Off < off {
			out = append(out, span{r.Off, off})
		}
		if r.End > end {
			out = append(out, span{end, r.End})
		}
	}
	return out
}

func (s spans) contains(x uint64) bool {
	for _, r := range s {
		if r.Off <= x && x < r.End {
			return true
		}
	}
	return false
}

// unsureMap lists, per inode, the bytes whose durable value is not promised:
// overwrites of mapped blocks that did not extend the file, not yet fsync'ed.
type unsureMap map[core.Ino]spans

func (u unsureMap) clone() unsureMap {
	c := unsureMap{}
	for k, v := range u {
		c[k] = slices.Clone(v)
	}
	return c
}

// diffTrees compares a recovered tree with an expected one. Data bytes in
// unsure ranges are not compared. It returns at most max differences.
func diffTrees(got, want tree, unsure unsureMap, max int) []string {
	var d []string
	add := func(format string, args ...any) {
		if len(d) < max {
			d = append(d, fmt.Sprintf(format, args...))
		}
	}
	paths := slices.Sorted(maps.Keys(want))
	for _, path := range paths {
		w := want[path]
		g, ok := got[path]
		if !ok {
			add("%s: missing (want %c ino %d size %d)", path, w.Type, w.Ino, w.Size)
			continue
		}
		if g.Type != w.Type || g.Ino != w.Ino || g.Mode != w.Mode || g.UID != w.UID || g.GID != w.GID ||
			g.Nlink != w.Nlink || g.Rdev != w.Rdev || g.Size != w.Size || g.Blocks != w.Blocks || g.Target != w.Target {
			add("%s: got {%c ino %d mode %o uid %d gid %d nlink %d size %d blocks %d target %q}, want {%c ino %d mode %o uid %d gid %d nlink %d size %d blocks %d target %q}",
				path, g.Type, g.Ino, g.Mode, g.UID, g.GID, g.Nlink, g.Size, g.Blocks, g.Target,
				w.Type, w.Ino, w.Mode, w.UID, w.GID, w.Nlink, w.Size, w.Blocks, w.Target)
		}
		if !maps.Equal(g.Xattrs, w.Xattrs) {
			add("%s: xattrs %s, want %s", path, xattrSummary(g.Xattrs), xattrSummary(w.Xattrs))
		}
		if w.Type == 'f' && g.Size == w.Size && !bytes.Equal(g.Data, w.Data) { // bytes.Equal: cheap under the race detector
			u := unsure[w.Ino]
			for i := range w.Data {
				if g.Data[i] != w.Data[i] && !u.contains(uint64(i)) {
					j := i
					for j < len(w.Data) && g.Data[j] != w.Data[j] {
						j++
					}
					add("%s: data differs at bytes [%d, %d) (first: got %#02x want %#02x; unsure ranges %v)",
						path, i, j, g.Data[i], w.Data[i], u)
					break
				}
			}
		}
	}
	for _, path := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[path]; !ok {
			g := got[path]
			add("%s: unexpected (%c ino %d size %d)", path, g.Type, g.Ino, g.Size)
		}
	}
	return d
}

func xattrSummary(x map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(x)) {
		v := x[k]
		if len(v) > 16 {
			parts = append(parts, fmt.Sprintf("%s=<%d bytes %x...>", k, len(v), v[:8]))
		} else {
			parts = append(parts, fmt.Sprintf("%s=%q", k, v))
		}
	}
	return "{" + strings.Join(parts, " ") + "}"
}

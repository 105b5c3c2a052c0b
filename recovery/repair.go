package recovery

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/dnnfs/dnnfs/format"
)

func nowNano() int64 { return time.Now().UnixNano() }

// linkBatch bounds the inodes one /lost+found transaction links; the next
// pass links the rest.
const linkBatch = 200

var errNoSpace = errors.New("no free block")

// lostFound links (a batch of) the unreachable inodes into /lost+found,
// creating it if needed, in one transaction.
func (a *analysis) lostFound() ([]rec, []string, error) {
	root := a.live[format.RootIno]
	if root == nil {
		return nil, nil, errors.New("no root directory to hold /lost+found")
	}
	batch := a.toLink[:min(len(a.toLink), linkBatch)]
	var lines []string
	var lf *inode
	lfName := "lost+found"
	for _, e := range root.entries {
		t := a.live[e.de.Ino]
		if !isLostFound(e.de.Name) || e.cut || !t.d.IsDir() || t.toLink {
			continue
		}
		if lf == nil || e.de.Name == "lost+found" {
			lf, lfName = t, e.de.Name
		}
	}
	var rw *dirAdder
	if lf == nil {
		ino := a.freeIno()
		if ino == 0 {
			return nil, nil, errors.New("no free inode slot for /lost+found")
		}
		now := nowNano()
		lf = &inode{ino: ino, off: a.sb.InodeOff(ino),
			d: format.Inode{Mode: format.ModeDir | 0o700, Nlink: 2, Gen: 1, Atime: now, Mtime: now, Ctime: now, Btime: now}}
		rw = a.newDirAdder(root)
		lfName = rw.unique("lost+found", ".")
		if err := rw.add(lfName, ino, format.DTDir); err != nil {
			return nil, nil, err
		}
		rw.d.Nlink++
		rw.d.Mtime, rw.d.Ctime = now, now
		lines = append(lines, fmt.Sprintf("inode %d: created /%s", ino, lfName))
	}
	w := a.newDirAdder(lf)
	for _, in := range batch {
		name := w.unique(fmt.Sprintf("#%d", in.ino), ".")
		if err := w.add(name, in.ino, format.DTOf(in.d.Mode)); err != nil {
			return nil, nil, err
		}
		if in.d.IsDir() {
			w.d.Nlink++
		}
		lines = append(lines, fmt.Sprintf("inode %d: %s linked into /%s as %s", in.ino, in.kind(), lfName, name))
	}
	recs, err := w.finish()
	if err != nil {
		return nil, nil, err
	}
	if rw != nil {
		more, err := rw.finish()
		if err != nil {
			return nil, nil, err
		}
		recs = append(recs, more...)
	}
	return recs, lines, nil
}

// isLostFound matches "lost+found" and the "lost+found.N" a repair makes
// when the name is taken by something else.
func isLostFound(name string) bool {
	rest, ok := strings.CutPrefix(name, "lost+found")
	if !ok || rest == "" {
		return ok
	}
	n, err := strconv.Atoi(strings.TrimPrefix(rest, "."))
	return strings.HasPrefix(rest, ".") && err == nil && n > 0
}

// freeIno is the lowest free inode slot after the root, or 0.
func (a *analysis) freeIno() format.Ino {
	for ino := format.Ino(2); uint64(ino) < a.sb.InodeCount; ino++ {
		if a.live[ino] == nil && a.bad[ino] == "" && isZero(a.v.read(a.sb.InodeOff(ino), format.InodeSize)) {
			return ino
		}
	}
	return 0
}

// dirAdder stages new entries in one directory.
type dirAdder struct {
	a      *analysis
	in     *inode
	d      format.Inode // staged inode
	exts   []format.Extent
	names  map[string]bool
	taken  map[uint64]bool
	fresh  map[format.Blk][]byte // new blocks, written whole
	order  []format.Blk
	recs   []rec // entries in existing blocks
	grown  bool
	cursor uint64
}

func (a *analysis) newDirAdder(in *inode) *dirAdder {
	w := &dirAdder{a: a, in: in, d: in.d, exts: append([]format.Extent(nil), in.exts...),
		names: map[string]bool{}, taken: map[uint64]bool{}, fresh: map[format.Blk][]byte{}}
	for _, e := range in.entries {
		w.names[e.de.Name] = true
	}
	return w
}

// unique returns base, or base+sep+N for the first N that is not taken.
func (w *dirAdder) unique(base, sep string) string {
	name := base
	for n := 1; w.names[name]; n++ {
		name = fmt.Sprintf("%s%s%d", base, sep, n)
	}
	return name
}

// add puts an entry in the first free slot, growing the directory by a
// zeroed block when none is free.
func (w *dirAdder) add(name string, ino format.Ino, typ uint8) error {
	de := format.Dirent{Name: name, Type: typ, Ino: ino}
	for {
		nslots := w.d.Size / format.BlockSize * format.DirentsPerBlock
		for ; w.cursor < nslots; w.cursor++ {
			s := w.cursor
			phys, ok := lookup(w.exts, s/format.DirentsPerBlock)
			if !ok || w.taken[s] {
				continue
			}
			within := s % format.DirentsPerBlock * format.DirentSize
			off := phys.Off() + format.Off(within)
			buf := w.fresh[phys]
			if buf == nil && !isZero(w.a.v.read(off, format.DirentSize)) {
				continue
			}
			w.taken[s] = true
			w.names[name] = true
			if buf != nil {
				de.Encode(buf[within:])
			} else {
				b := make([]byte, format.DirentSize)
				de.Encode(b)
				w.recs = append(w.recs, rec{off, b})
			}
			return nil
		}
		goal := w.a.sb.DataStart
		if n := len(w.exts); n > 0 {
			goal = w.exts[n-1].Phys + format.Blk(w.exts[n-1].Len)
		}
		b, ok := w.a.used.AllocContig(goal, 1)
		if !ok {
			return fmt.Errorf("growing directory %d: %w", w.in.ino, errNoSpace)
		}
		w.fresh[b] = make([]byte, format.BlockSize)
		w.order = append(w.order, b)
		w.exts = mergeExtents(w.exts, format.Extent{Logical: w.d.Size / format.BlockSize, Phys: b, Len: 1})
		w.d.Size += format.BlockSize
		w.grown = true
	}
}

// finish returns the records: new blocks, entries, overflow blocks, inode.
func (w *dirAdder) finish() ([]rec, error) {
	var recs []rec
	for _, b := range w.order {
		recs = append(recs, rec{b.Off(), w.fresh[b]})
	}
	recs = append(recs, w.recs...)
	if w.grown {
		more, err := w.a.encodeExtents(w.in, &w.d, w.exts)
		if err != nil {
			return nil, err
		}
		recs = append(recs, more...)
	}
	buf := make([]byte, format.InodeSize)
	w.d.Encode(buf)
	return append(recs, rec{w.in.off, buf}), nil
}

// encodeExtents stores exts into d (inline part) and returns the overflow
// blocks' records (format.EncodeExtents), reusing in's chain and
// allocating more if needed.
func (a *analysis) encodeExtents(in *inode, d *format.Inode, exts []format.Extent) ([]rec, error) {
	need := format.OverflowBlocks(len(exts))
	ovf := append([]format.Blk(nil), in.ovf...)
	for len(ovf) < need {
		goal := a.sb.DataStart
		if len(ovf) > 0 {
			goal = ovf[len(ovf)-1] + 1
		}
		b, ok := a.used.AllocContig(goal, 1)
		if !ok {
			return nil, fmt.Errorf("extent overflow block for inode %d: %w", in.ino, errNoSpace)
		}
		ovf = append(ovf, b)
	}
	var recs []rec
	format.EncodeExtents(d, exts, ovf[:need], func(b format.Blk, block []byte) {
		recs = append(recs, rec{b.Off(), bytes.Clone(block)})
	})
	return recs, nil
}

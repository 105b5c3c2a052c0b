package recovery

import (
	"bytes"
	"fmt"
	"sort"
	"strings"

	"github.com/dnnfs/dnnfs/alloc"
	"github.com/dnnfs/dnnfs/format"
	"github.com/dnnfs/dnnfs/journal/seglog"
	"github.com/dnnfs/dnnfs/pmem"
)

var zeros [format.BlockSize]byte

// isZero is format.IsZero at memory-compare speed (the inode table scan
// runs it on every slot).
func isZero(b []byte) bool {
	for len(b) > len(zeros) {
		if !bytes.Equal(b[:len(zeros)], zeros[:]) {
			return false
		}
		b = b[len(zeros):]
	}
	return bytes.Equal(b, zeros[:len(b)])
}

// maxFileBlocks bounds a file's block numbers: blocks up to the one
// holding byte core.MaxFileSize-1 (2^63-2). recovery_test checks it
// against package core.
const maxFileBlocks = format.MaxFileBlocks

// Repair phases, applied lowest first with a re-check in between.
const (
	phaseTier = 1 + iota // direct superblock stores
	phaseInode
	phaseEntry
	phaseLink
	phaseCount
)

// fix is one atomic repair: its records go into one transaction. A
// direct fix instead stores into the superblocks itself (they lie outside
// what a transaction may target).
type fix struct {
	phase  int
	what   string // for errors
	build  func() (recs []rec, lines []string, err error)
	direct func(m pmem.Medium) (lines []string, err error)
}

// inode is a live inode: it decodes, its extents are valid and its blocks
// are its own.
type inode struct {
	ino  format.Ino
	off  format.Off
	d    format.Inode
	exts []format.Extent
	ovf  []format.Blk

	// Directories.
	entries []*entry // valid entries, in slot order
	subdirs int      // entries kept naming subdirectories

	namers  []*entry // valid entries naming this inode
	named   int      // entries in reachable directories naming it (non-directories)
	visited bool     // reachable from the root (or from a /lost+found candidate)
	orphan  bool     // link count 0, nothing names it
	toLink  bool     // to be linked into /lost+found
}

func (in *inode) kind() string {
	switch {
	case in.d.IsDir():
		return "directory"
	case in.d.IsSymlink():
		return "symlink"
	}
	switch in.d.Mode & format.ModeType {
	case format.ModeFifo:
		return "FIFO"
	case format.ModeSock:
		return "socket"
	case format.ModeChr:
		return "character device"
	case format.ModeBlk:
		return "block device"
	}
	return "regular file"
}

// entry is a valid directory entry.
type entry struct {
	dir  *inode
	slot uint64
	off  format.Off
	blk  format.Blk
	de   format.Dirent
	cut  bool // names a directory that already has a parent: to be cleared
}

// claim is a run of data blocks an inode owns.
type claim struct {
	ino  format.Ino
	phys format.Blk
	n    uint64
	what string
}

func (c claim) String() string {
	if c.n == 1 {
		return fmt.Sprintf("%s (pool block %d)", c.what, c.phys)
	}
	return fmt.Sprintf("%s (pool blocks %d..%d)", c.what, c.phys, uint64(c.phys)+c.n-1)
}

type analysis struct {
	m    pmem.Medium
	v    *view
	sb   format.Superblock
	rep  *Report
	used *alloc.Map // data blocks claimed so far; repairs allocate from it

	fixes    []*fix
	rewrites map[format.Ino]*fix // the one rewrite fix of each inode

	cand   []*inode              // decoded, extents valid; before claims
	live   map[format.Ino]*inode // live inodes
	order  []*inode              // live inodes by number
	bad    map[format.Ino]string // non-zero slots to clear: why
	badBy  map[format.Ino][]*entry
	claims []claim
	toLink []*inode

	tierDevs int  // devices the SSD-tier registry lists
	tierBad  bool // the superblock names a registry that is damaged or shared
}

func analyze(m pmem.Medium, overlay bool, progress Progress) (*analysis, error) {
	if progress == nil {
		progress = func(string, int, int) {}
	}
	a := &analysis{m: m, rep: &Report{}, live: map[format.Ino]*inode{}, rewrites: map[format.Ino]*fix{},
		bad: map[format.Ino]string{}, badBy: map[format.Ino][]*entry{}}
	sb, useReplica, probs, err := readSuperblocks(m)
	if err != nil {
		return nil, err
	}
	a.sb = sb
	a.rep.ReplicaUsed = useReplica
	a.rep.Problems = append(a.rep.Problems, probs...)
	pending, recs, probs := readJournal(m, &sb)
	a.rep.JournalPending = pending
	a.rep.Problems = append(a.rep.Problems, probs...)
	if !overlay {
		recs = nil
	}
	a.v = newView(m.Bytes(), recs)
	a.used = alloc.New(sb.DataStart, sb.Blocks)

	steps := []struct {
		name string
		run  func()
	}{
		{"inodes", a.scanInodes}, {"blocks", a.claimBlocks}, {"SSD tier", a.checkTier}, {"tables", a.checkTables},
		{"xattrs", a.checkXattrs}, {"sessions", a.checkSessions}, {"root", a.checkRoot}, {"fields", a.checkFields},
		{"directories", a.scanDirs}, {"bad inodes", a.badInodeFixes}, {"namespace", a.namespace}, {"link counts", a.linkCounts},
	}
	for i, s := range steps {
		progress(s.name, i, len(steps))
		s.run()
	}
	progress("done", len(steps), len(steps))

	for _, in := range a.order {
		a.rep.Inodes++
		switch {
		case in.d.IsDir():
			a.rep.Dirs++
		case in.d.IsSymlink():
			a.rep.Symlinks++
		default:
			a.rep.Files++
		}
	}
	a.rep.UsedBlocks = a.used.Used()
	a.rep.FreeBlocks = a.used.Free()
	return a, nil
}

// readBlocks returns blocks [b, b+n) as replay would leave them.
func (a *analysis) readBlocks(b format.Blk, n uint64) []byte {
	return a.v.read(b.Off(), int(n)*format.BlockSize)
}

func (a *analysis) problem(p Problem) { a.rep.Problems = append(a.rep.Problems, p) }

func (a *analysis) addFix(phase int, what string, build func() ([]rec, []string, error)) {
	a.fixes = append(a.fixes, &fix{phase: phase, what: what, build: build})
}

func (a *analysis) inodeProblem(in *inode, what string) {
	a.problem(Problem{Structure: "inode", Ino: in.ino, Blk: a.inodeBlk(in.ino), Off: in.off, What: what, Repairable: true})
}

// inodeBlk is the inode table block holding slot ino.
func (a *analysis) inodeBlk(ino format.Ino) format.Blk {
	return a.sb.InodeStart + format.Blk(ino/format.InodesPerBlock)
}

// ---------------------------------------------------------------------
// Inodes

func (a *analysis) scanInodes() {
	sb := &a.sb
	if off := sb.InodeOff(0); !isZero(a.v.read(off, format.InodeSize)) {
		a.problem(Problem{Structure: "inode table", Blk: sb.InodeStart, Off: off,
			What: "slot 0 (never used) is not zero; Repair zeroes it", Repairable: true})
		a.addFix(phaseInode, "inode slot 0", func() ([]rec, []string, error) {
			return []rec{{off, make([]byte, format.InodeSize)}}, []string{"inode table: zeroed slot 0"}, nil
		})
	}
	for ino := format.Ino(1); uint64(ino) < sb.InodeCount; ino++ {
		off := sb.InodeOff(ino)
		b := a.v.read(off, format.InodeSize)
		if isZero(b) {
			continue
		}
		d, err := format.DecodeInode(b)
		if err != nil {
			a.bad[ino] = errText(err, "inode: ")
			continue
		}
		in := &inode{ino: ino, off: off, d: d}
		if ino == format.RootIno && !d.IsDir() {
			a.bad[ino] = "the root inode is a " + in.kind() + ", not a directory"
			continue
		}
		if why := a.loadExtents(in); why != "" {
			a.bad[ino] = why
			continue
		}
		a.cand = append(a.cand, in)
	}
}

// loadExtents collects and validates the inline extents and the overflow
// chain. It returns why the inode is invalid, or "".
func (a *analysis) loadExtents(in *inode) string {
	d := &in.d
	exts, ovf, err := format.DecodeExtents(d, a.sb.ValidData, func(b format.Blk) []byte { return a.readBlocks(b, 1) })
	in.ovf = ovf
	if err != nil {
		return err.Error()
	}
	in.exts = exts
	switch {
	case d.IsSymlink():
		if d.Size == 0 || d.Size >= format.BlockSize {
			return fmt.Sprintf("symlink target size %d (must be 1..%d)", d.Size, format.BlockSize-1)
		}
		if len(exts) != 1 || exts[0].Logical != 0 || exts[0].Len != 1 {
			return "symlink has no target block (one extent of one block at file block 0)"
		}
	case d.IsReg():
		if d.Size > format.MaxFileSize {
			return fmt.Sprintf("size %d exceeds the largest file size", d.Size)
		}
	case d.IsSpecial():
		if len(exts) != 0 || len(in.ovf) != 0 {
			return fmt.Sprintf("a %s maps data blocks (%d extents, %d overflow blocks)", in.kind(), len(exts), len(in.ovf))
		}
	}
	return ""
}

// claimBlocks gives each block to the lowest-numbered inode that maps it;
// an inode that maps a block already taken (or one of its own twice) is
// invalid.
func (a *analysis) claimBlocks() {
	for _, in := range a.cand {
		var cs []claim
		for i, e := range in.exts {
			cs = append(cs, claim{in.ino, e.Phys, e.Len, fmt.Sprintf("extent %d", i)})
		}
		for i, b := range in.ovf {
			cs = append(cs, claim{in.ino, b, 1, fmt.Sprintf("extent overflow block %d", i)})
		}
		if why := a.tryClaim(in.ino, cs); why != "" {
			a.bad[in.ino] = why
			continue
		}
		a.live[in.ino] = in
		a.order = append(a.order, in)
	}
}

// tryClaim marks the runs used, or returns why it cannot and marks nothing.
func (a *analysis) tryClaim(ino format.Ino, cs []claim) string {
	sorted := append([]claim(nil), cs...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].phys < sorted[j].phys })
	for i := 1; i < len(sorted); i++ {
		p, c := sorted[i-1], sorted[i]
		if uint64(c.phys) < uint64(p.phys)+p.n {
			return fmt.Sprintf("%s overlaps its own %s", c, p)
		}
	}
	for _, c := range cs {
		for k := uint64(0); k < c.n; k++ {
			if b := c.phys + format.Blk(k); a.used.IsUsed(b) {
				o := a.owner(b)
				if o.ino == 0 {
					return fmt.Sprintf("%s overlaps the %s", c, o)
				}
				return fmt.Sprintf("%s overlaps inode %d's %s", c, o.ino, o)
			}
		}
	}
	for _, c := range cs {
		a.used.MarkUsed(c.phys, c.n) // checked free above
	}
	a.claims = append(a.claims, cs...)
	return ""
}

func (a *analysis) owner(b format.Blk) claim {
	for _, c := range a.claims {
		if b >= c.phys && uint64(b) < uint64(c.phys)+c.n {
			return c
		}
	}
	return claim{what: "?"}
}

// checkXattrs validates xattr regions after all extents are claimed, so a
// bad xattr pointer costs the attributes, never another file's data.
func (a *analysis) checkXattrs() {
	for _, in := range a.order {
		x := in.d.Xattr
		if x == 0 {
			continue
		}
		var why string
		_, nb, err := format.DecodeXattrRegion(x, a.sb.ValidData, a.readBlocks)
		if err != nil {
			why = err.Error()
		} else if w := a.tryClaim(in.ino, []claim{{in.ino, x, nb, "xattr region"}}); w != "" {
			why = w
		}
		if why != "" {
			a.inodeProblem(in, why+"; Repair drops the inode's extended attributes")
			in.d.Xattr = 0
			a.rewrite(in, fmt.Sprintf("dropped its extended attributes (xattr region at block %d was damaged)", x))
		}
	}
}

// checkSessions validates the segmented-I/O session fields in the
// inode's reserved area and an open session's F_log and P_log regions,
// after extents and xattrs are claimed. A damaged session is abandoned
// (the fields are cleared, which frees its logs): the file's data stays,
// only the resume points are lost.
func (a *analysis) checkSessions() {
	for _, in := range a.order {
		why := a.checkSession(in)
		if why == "" {
			continue
		}
		a.inodeProblem(in, why+"; Repair abandons the session (the file's data is kept, its resume points are lost)")
		clear(sessionArea(&in.d))
		a.rewrite(in, "abandoned its segmented-I/O session ("+why+")")
	}
}

// checkSession returns what is wrong with in's session, or "". The rules
// about the inode (which kinds may have a session, reserved bytes) are
// here; the session fields and the log they name are seglog.Check's.
func (a *analysis) checkSession(in *inode) string {
	d := &in.d
	rest := sessionArea(d)[format.INSessionMode+4-format.INSession:]
	switch {
	case isZero(sessionArea(d)):
		return ""
	case d.IsDir() || d.IsSpecial():
		return "a " + in.kind() + " has segmented-I/O session fields"
	case !isZero(rest):
		return "reserved bytes after the session fields are not zero"
	}
	st, err := seglog.Check(sessionSource{a}, seglog.FieldsOf(d))
	if err != nil {
		return "session " + err.Error()
	}
	if st == nil {
		return "" // a finished session
	}
	regions := st.Layout.Regions()
	return a.tryClaim(in.ino, []claim{
		{in.ino, regions[0].Phys, regions[0].Len, "session F_log"},
		{in.ino, regions[1].Phys, regions[1].Len, "session P_log"},
	})
}

// sessionSource shows the segment log reader the pool as replay would
// leave it.
type sessionSource struct{ a *analysis }

func (s sessionSource) ValidData(b format.Blk, n uint64) bool { return s.a.sb.ValidData(b, n) }

func (s sessionSource) Read(off format.Off, n int) []byte { return s.a.v.read(off, n) }

// checkRoot: inode 1 must be a live directory (a damaged or non-directory
// root is in a.bad).
func (a *analysis) checkRoot() {
	if a.live[format.RootIno] == nil && a.bad[format.RootIno] == "" {
		off := a.sb.InodeOff(format.RootIno)
		a.problem(Problem{Structure: "inode", Ino: format.RootIno, Blk: a.inodeBlk(format.RootIno), Off: off,
			What: "the root directory's slot is free; Repair makes an empty root (everything goes to /lost+found)", Repairable: true})
		a.addFix(phaseInode, "root inode", a.rootFix("was free"))
	}
}

func (a *analysis) rootFix(why string) func() ([]rec, []string, error) {
	return func() ([]rec, []string, error) {
		now := nowNano()
		d := format.Inode{Mode: format.ModeDir | 0o755, Nlink: 2, Gen: 1, Atime: now, Mtime: now, Ctime: now, Btime: now}
		buf := make([]byte, format.InodeSize)
		d.Encode(buf)
		return []rec{{a.sb.InodeOff(format.RootIno), buf}},
			[]string{"inode 1: root " + why + ": made an empty root directory; its entries, if any, are lost and their inodes go to /lost+found"}, nil
	}
}

// rewrite schedules (once per inode) a rewrite of in.d, whose fields the
// checks have already corrected, with a line per correction.
func (a *analysis) rewrite(in *inode, line string) {
	if f := a.rewrites[in.ino]; f != nil {
		prev := f.build
		f.build = func() ([]rec, []string, error) {
			recs, lines, err := prev()
			return recs, append(lines, fmt.Sprintf("inode %d: %s", in.ino, line)), err
		}
		return
	}
	a.addFix(phaseInode, fmt.Sprintf("rewrite inode %d", in.ino), func() ([]rec, []string, error) {
		d := in.d
		var recs []rec
		if !sameExtents(in, &d) {
			ovf, err := a.encodeExtents(in, &d, in.exts)
			if err != nil {
				return nil, nil, err
			}
			recs = append(recs, ovf...)
		}
		buf := make([]byte, format.InodeSize)
		d.Encode(buf)
		recs = append(recs, rec{in.off, buf})
		return recs, []string{fmt.Sprintf("inode %d: %s", in.ino, line)}, nil
	})
	a.rewrites[in.ino] = a.fixes[len(a.fixes)-1]
}

// sameExtents reports whether d still describes in.exts (a trim changes
// in.exts and leaves d's copy behind).
func sameExtents(in *inode, d *format.Inode) bool {
	if uint64(d.Extents) != uint64(len(in.exts)) {
		return false
	}
	for i := 0; i < min(len(in.exts), format.InlineExtents); i++ {
		if d.Inline[i] != in.exts[i] {
			return false
		}
	}
	return len(in.exts) <= format.InlineExtents
}

// checkFields checks the fields the decoder accepts but the file system
// never writes.
func (a *analysis) checkFields() {
	for _, in := range a.order {
		d := &in.d
		if extra := d.Mode &^ (format.ModeType | format.ModePerm); extra != 0 {
			a.inodeProblem(in, fmt.Sprintf("mode %#o has bits outside the file type and permissions; Repair clears them", d.Mode))
			d.Mode &^= extra
			a.rewrite(in, fmt.Sprintf("cleared mode bits %#o", extra))
		}
		if extra := d.Flags &^ format.InodeFlagsKnown; extra != 0 {
			a.inodeProblem(in, fmt.Sprintf("unknown flags %#x; Repair clears them", extra))
			d.Flags &^= extra
			a.rewrite(in, fmt.Sprintf("cleared unknown flags %#x", extra))
		}
		if t := d.Mode & format.ModeType; d.Rdev != 0 && t != format.ModeChr && t != format.ModeBlk {
			a.inodeProblem(in, fmt.Sprintf("a %s has device number %#x; Repair clears it", in.kind(), d.Rdev))
			d.Rdev = 0
			a.rewrite(in, "cleared the device number")
		}
		if d.IsSpecial() && d.Size != 0 {
			a.inodeProblem(in, fmt.Sprintf("a %s has size %d; Repair sets it to 0", in.kind(), d.Size))
			d.Size = 0
			a.rewrite(in, "set the size to 0")
		}
		if !d.IsDir() {
			continue
		}
		if r := d.Size % format.BlockSize; r != 0 {
			a.inodeProblem(in, fmt.Sprintf("directory size %d is not a multiple of %d; Repair rounds it down (the mount code ignores the partial block)", d.Size, format.BlockSize))
			d.Size -= r
			a.rewrite(in, fmt.Sprintf("rounded the directory size down to %d", d.Size))
		}
		nb := d.Size / format.BlockSize
		if len(in.exts) > 0 && in.exts[len(in.exts)-1].End() > nb {
			kept := trimExtents(in.exts, nb)
			a.inodeProblem(in, fmt.Sprintf("directory maps blocks past its size (%d blocks); Repair unmaps them (the mount code ignores them)", nb))
			a.unclaimTrimmed(in, kept)
			in.exts = kept
			a.rewrite(in, fmt.Sprintf("unmapped directory blocks past block %d", nb))
		}
		var mapped uint64
		for _, e := range in.exts {
			mapped += e.Len
		}
		if mapped < nb {
			first := uint64(0)
			for _, e := range in.exts {
				if e.Logical != first {
					break
				}
				first = e.End()
			}
			a.inodeProblem(in, fmt.Sprintf("directory has %d unmapped blocks below its size (first: block %d); Repair renumbers its %d blocks to close the holes (entries keep their names, not their slot numbers)", nb-mapped, first, mapped))
			var packed []format.Extent
			for _, e := range in.exts {
				e.Logical = 0
				if n := len(packed); n > 0 {
					e.Logical = packed[n-1].End()
				}
				packed = mergeExtents(packed, e)
			}
			in.exts = packed
			d.Size = mapped * format.BlockSize
			a.rewrite(in, fmt.Sprintf("closed the holes of the directory: %d blocks", mapped))
		}
	}
}

// unclaimTrimmed releases the blocks a directory trim drops.
func (a *analysis) unclaimTrimmed(in *inode, kept []format.Extent) {
	for _, e := range in.exts {
		keep := uint64(0)
		for _, k := range kept {
			if k.Phys == e.Phys {
				keep = k.Len
			}
		}
		if e.Len > keep {
			a.used.Release(e.Phys+format.Blk(keep), e.Len-keep)
		}
	}
}

// trimExtents keeps the file blocks below nb.
func trimExtents(exts []format.Extent, nb uint64) []format.Extent {
	var kept []format.Extent
	for _, e := range exts {
		if e.Logical >= nb {
			continue
		}
		if e.End() > nb {
			e.Len = nb - e.Logical
		}
		kept = append(kept, e)
	}
	return kept
}

// lookup maps file block fb through sorted extents.
func lookup(exts []format.Extent, fb uint64) (format.Blk, bool) {
	phys, _, ok := format.MapBlock(exts, fb)
	return phys, ok
}

// mergeExtents inserts e (not overlapping) into sorted exts, merging
// with a neighbour it continues.
func mergeExtents(exts []format.Extent, e format.Extent) []format.Extent {
	i := sort.Search(len(exts), func(i int) bool { return exts[i].Logical > e.Logical })
	if i > 0 {
		p := &exts[i-1]
		if p.End() == e.Logical && p.Phys+format.Blk(p.Len) == e.Phys && p.Unwritten == e.Unwritten {
			p.Len += e.Len
			return exts
		}
	}
	exts = append(exts, format.Extent{})
	copy(exts[i+1:], exts[i:])
	exts[i] = e
	return exts
}

// ---------------------------------------------------------------------
// Directories

func (a *analysis) scanDirs() {
	for _, dir := range a.order {
		if !dir.d.IsDir() {
			continue
		}
		names := map[string]uint64{}
		nb := dir.d.Size / format.BlockSize
		for k := uint64(0); k < nb; k++ {
			phys, ok := lookup(dir.exts, k)
			if !ok {
				continue // a hole reads as free slots
			}
			for s := uint64(0); s < format.DirentsPerBlock; s++ {
				slot := k*format.DirentsPerBlock + s
				off := phys.Off() + format.Off(s*format.DirentSize)
				a.checkSlot(dir, names, phys, slot, off)
			}
		}
	}
}

func (a *analysis) dirProblem(dir *inode, blk format.Blk, off format.Off, what string) {
	a.problem(Problem{Structure: "directory", Ino: dir.ino, Blk: blk, Off: off, What: what, Repairable: true})
}

// clearSlotFix schedules zeroing a directory slot.
func (a *analysis) clearSlotFix(dir *inode, off format.Off, line string) {
	a.addFix(phaseEntry, fmt.Sprintf("directory %d slot at byte %d", dir.ino, off), func() ([]rec, []string, error) {
		return []rec{{off, make([]byte, format.DirentSize)}}, []string{fmt.Sprintf("directory %d (byte %d): %s", dir.ino, off, line)}, nil
	})
}

func (a *analysis) checkSlot(dir *inode, names map[string]uint64, blk format.Blk, slot uint64, off format.Off) {
	de, used, err := format.DecodeDirent(a.v.read(off, format.DirentSize))
	if err != nil {
		msg := fmt.Sprintf("slot %d: %s", slot, errText(err, "dirent: "))
		a.dirProblem(dir, blk, off, msg+"; Repair clears the slot (the name is lost; its inode goes to /lost+found)")
		a.clearSlotFix(dir, off, "cleared damaged slot "+fmt.Sprint(slot)+": "+errText(err, "dirent: "))
		return
	}
	if !used {
		return
	}
	clear := func(why string) {
		a.dirProblem(dir, blk, off, fmt.Sprintf("entry %q %s; Repair clears it", de.Name, why))
		a.clearSlotFix(dir, off, fmt.Sprintf("cleared entry %q: it %s", de.Name, why))
	}
	ino := de.Ino
	switch {
	case uint64(ino) >= a.sb.InodeCount:
		clear(fmt.Sprintf("names inode %d, beyond the %d-slot inode table", ino, a.sb.InodeCount))
		return
	case ino == format.RootIno:
		clear("names the root directory, which has no parent")
		return
	case a.bad[ino] != "":
		a.dirProblem(dir, blk, off, fmt.Sprintf("entry %q names damaged inode %d; Repair clears it with the inode", de.Name, ino))
		a.badBy[ino] = append(a.badBy[ino], &entry{dir: dir, slot: slot, off: off, blk: blk, de: de})
		return
	case a.live[ino] == nil:
		clear(fmt.Sprintf("names free inode %d", ino))
		return
	}
	if prev, dup := names[de.Name]; dup {
		clear(fmt.Sprintf("appears twice (first in slot %d)", prev))
		return
	}
	names[de.Name] = slot
	t := a.live[ino]
	e := &entry{dir: dir, slot: slot, off: off, blk: blk, de: de}
	if want := format.DTOf(t.d.Mode); de.Type != want {
		a.dirProblem(dir, blk, off, fmt.Sprintf("entry %q has type %d, but inode %d is a %s (type %d); Repair corrects the type", de.Name, de.Type, ino, t.kind(), want))
		fixed := de
		fixed.Type = want
		a.addFix(phaseEntry, fmt.Sprintf("directory %d slot at byte %d", dir.ino, off), func() ([]rec, []string, error) {
			if e.cut {
				return nil, nil, nil // cleared instead
			}
			buf := make([]byte, format.DirentSize)
			fixed.Encode(buf)
			return []rec{{off, buf}}, []string{fmt.Sprintf("directory %d (byte %d): entry %q: type %d -> %d", dir.ino, off, de.Name, de.Type, want)}, nil
		})
	}
	dir.entries = append(dir.entries, e)
	t.namers = append(t.namers, e)
}

// badInodeFixes reports the damaged inodes and schedules clearing each
// with the entries naming it, in one transaction.
func (a *analysis) badInodeFixes() {
	inos := make([]format.Ino, 0, len(a.bad))
	for ino := range a.bad {
		inos = append(inos, ino)
	}
	sort.Slice(inos, func(i, j int) bool { return inos[i] < inos[j] })
	for _, ino := range inos {
		why := a.bad[ino]
		off := a.sb.InodeOff(ino)
		if ino == format.RootIno {
			a.problem(Problem{Structure: "inode", Ino: ino, Blk: a.inodeBlk(ino), Off: off,
				What: why + "; Repair makes an empty root directory (its entries are lost, everything goes to /lost+found)", Repairable: true})
			a.addFix(phaseInode, "root inode", a.rootFix("was damaged ("+why+")"))
			continue
		}
		namers := a.badBy[ino]
		a.problem(Problem{Structure: "inode", Ino: ino, Blk: a.inodeBlk(ino), Off: off,
			What: why + fmt.Sprintf("; Repair clears the inode and the %d entries naming it: its data is lost", len(namers)), Repairable: true})
		a.addFix(phaseInode, fmt.Sprintf("clear inode %d", ino), func() ([]rec, []string, error) {
			recs := []rec{{off, make([]byte, format.InodeSize)}}
			var names []string
			for _, e := range namers {
				recs = append(recs, rec{e.off, make([]byte, format.DirentSize)})
				names = append(names, fmt.Sprintf("%q in directory %d", e.de.Name, e.dir.ino))
			}
			line := fmt.Sprintf("inode %d: cleared (%s); its data is lost", ino, why)
			if len(names) > 0 {
				line += "; removed entries " + strings.Join(names, ", ")
			}
			return recs, []string{line}, nil
		})
	}
}

// ---------------------------------------------------------------------
// Namespace

func (a *analysis) namespace() {
	for _, in := range a.order {
		in.orphan = in.ino != format.RootIno && in.d.Nlink == 0 && len(in.namers) == 0 &&
			!(in.d.IsDir() && len(in.entries) > 0)
	}
	if root := a.live[format.RootIno]; root != nil {
		root.visited = true
		a.visit(root)
	}
	for _, in := range a.order {
		if !in.d.IsDir() || in.visited || in.orphan {
			continue
		}
		// Walk up the first parent until the top of the detached tree, or
		// until the walk comes round (a cycle): that one goes to lost+found.
		top, seen := in, map[*inode]bool{in: true}
		for {
			var p *inode
			for _, e := range top.namers {
				if !e.cut && !e.dir.visited {
					p = e.dir
					break
				}
			}
			if p == nil || seen[p] {
				break
			}
			seen[p] = true
			top = p
		}
		why := "no directory entry names it"
		if len(top.namers) > 0 {
			why = "it is part of a directory cycle"
		}
		a.unreachable(top, why)
		a.visit(top)
	}
	for _, in := range a.order {
		if !in.d.IsDir() && !in.visited && !in.orphan {
			a.unreachable(in, "no directory entry names it")
		}
	}
}

// visit walks the tree below top breadth-first. A directory named a second
// time is a second parent: that entry is cut.
func (a *analysis) visit(top *inode) {
	queue := []*inode{top}
	for len(queue) > 0 {
		dir := queue[0]
		queue = queue[1:]
		for _, e := range dir.entries {
			t := a.live[e.de.Ino]
			if !t.d.IsDir() {
				t.named++
				t.visited = true
				continue
			}
			if t.visited {
				e.cut = true
				a.dirProblem(dir, e.blk, e.off, fmt.Sprintf("entry %q names directory %d, which already has a parent (a directory has exactly one); Repair clears this entry", e.de.Name, t.ino))
				a.clearSlotFix(dir, e.off, fmt.Sprintf("cleared entry %q: a second parent of directory %d", e.de.Name, t.ino))
				continue
			}
			t.visited = true
			dir.subdirs++
			queue = append(queue, t)
		}
	}
}

func (a *analysis) unreachable(in *inode, why string) {
	in.visited = true
	in.toLink = true
	a.inodeProblem(in, fmt.Sprintf("%s not reachable from the root (%s); Repair links it into /lost+found as #%d", in.kind(), why, in.ino))
	if len(a.toLink) == 0 {
		a.addFix(phaseLink, "link into /lost+found", a.lostFound)
	}
	a.toLink = append(a.toLink, in)
}

func (a *analysis) linkCounts() {
	for _, in := range a.order {
		if in.orphan {
			what := "orphan: link count 0 and no directory entry names it (unlinked while open); Repair frees it"
			if a.sb.State == format.StateMounted {
				what += " (the daemon died with it open: the next mount would free it too)"
			}
			a.inodeProblem(in, what)
			off := in.off
			ino := in.ino
			a.addFix(phaseCount, fmt.Sprintf("free orphan %d", ino), func() ([]rec, []string, error) {
				return []rec{{off, make([]byte, format.InodeSize)}}, []string{fmt.Sprintf("inode %d: freed orphan", ino)}, nil
			})
			continue
		}
		var want uint32
		var why string
		if in.d.IsDir() {
			want = uint32(2 + in.subdirs)
			why = fmt.Sprintf("it has %d subdirectories", in.subdirs)
		} else {
			if in.toLink {
				continue // counted once linked
			}
			want = uint32(in.named)
			why = fmt.Sprintf("%d directory entries name it", in.named)
		}
		orphanFlag := in.d.Flags&format.InodeOrphan != 0
		if in.d.Nlink == want && !orphanFlag {
			continue
		}
		if in.d.Nlink != want {
			a.inodeProblem(in, fmt.Sprintf("link count %d, but %s (want %d); Repair sets it", in.d.Nlink, why, want))
		} else {
			a.inodeProblem(in, "the unlinked-while-open flag is set, but directory entries name it; Repair clears the flag")
		}
		d, off, ino, old := in.d, in.off, in.ino, in.d.Nlink
		d.Nlink = want
		d.Flags &^= format.InodeOrphan
		a.addFix(phaseCount, fmt.Sprintf("link count of %d", ino), func() ([]rec, []string, error) {
			buf := make([]byte, format.InodeSize)
			d.Encode(buf)
			line := fmt.Sprintf("inode %d: link count %d -> %d", ino, old, want)
			if orphanFlag {
				line += ", unlinked-while-open flag cleared"
			}
			return []rec{{off, buf}}, []string{line}, nil
		})
	}
}

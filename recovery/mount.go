package recovery

import (
	"fmt"

	"github.com/dnnfs/dnnfs/alloc"
	"github.com/dnnfs/dnnfs/format"
	"github.com/dnnfs/dnnfs/journal"
	"github.com/dnnfs/dnnfs/journal/seglog"
	"github.com/dnnfs/dnnfs/pmem"
)

// fsckHint ends the errors of a pool that needs the checker before it can
// be mounted.
const fsckHint = "; run `dnnfs fsck --pool PATH`"

// State is what Mount read from the media after a crash or a clean
// unmount: everything the file-system core needs to build its DRAM
// indexes. Mount has replayed the journal; it has changed nothing else.
type State struct {
	SB format.Superblock
	// PrimaryErr is the primary superblock's problem when the replica
	// was used, else nil.
	PrimaryErr error
	// Journal is the pool's journal, replayed and ready for transactions.
	Journal *journal.Journal
	// Replayed counts the records of the committed transaction Mount
	// replayed (0: none was pending).
	Replayed int
	// Inodes are the live inodes, by number.
	Inodes []*Inode
	// FreeInos are the free inode slots, highest first (the lowest is
	// taken first).
	FreeInos []format.Ino
	// Free is the free-block map, with the blocks of every extent,
	// overflow chain, xattr region, table descriptor and session log, and
	// the SSD-tier registry block, marked used.
	Free *alloc.Map
	// Orphans are the inodes with link count 0 that no entry names
	// (unlinked while open when the last daemon died): the core frees them.
	Orphans []format.Ino
	// Misnamed are inodes with link count 0 that entries do name: the
	// count is wrong, not the file gone, so they are kept (fsck fixes them).
	Misnamed []format.Ino
}

// Inode is a live inode as Mount decoded it.
type Inode struct {
	Ino         format.Ino
	D           format.Inode
	Exts        []format.Extent // sorted by Logical, disjoint
	Ovf         []format.Blk    // extent overflow chain, in order
	Xattrs      []format.Xattr
	XattrBlocks uint64
	// Directories: the used slots, in slot order, and the directory
	// naming this one (the root names itself).
	Entries []Entry
	Parent  format.Ino
	// Refs counts the directory entries naming the inode.
	Refs int
	// Table is an embedding table's descriptor header (its blocks start at
	// D.TableBlk()), nil for other files.
	Table *format.TableHeader
	// Session is the open segmented session's log read back (resume
	// points), nil when none is open.
	Session *seglog.State
}

// Entry is a used directory slot.
type Entry struct {
	Slot uint64
	format.Dirent
}

// Mount reads the pool on m as the file system is about to mount it:
// the superblock pair (primary, else replica), the journal (a committed
// transaction is replayed: this is the only write), where the SSD-tier
// registry is, and the inode table with every live inode's extents, xattrs and
// directory entries. It rebuilds free space and finds orphans. A structure
// that does not decode fails the mount with what is wrong and where; the
// checker (Check) then lists every problem.
func Mount(m pmem.Medium) (*State, error) {
	pair, err := format.DecodeSuperblockPair(m.Bytes(), m.Size())
	if err != nil {
		return nil, err
	}
	sb, _ := pair.Use()
	st := &State{SB: sb, PrimaryErr: pair.PrimaryErr}
	if st.Journal, err = journal.Open(m, &sb); err != nil {
		return nil, err
	}
	if st.Replayed, err = st.Journal.Replay(); err != nil {
		return nil, fmt.Errorf("journal replay: %w"+fsckHint, err)
	}
	st.Free = alloc.New(sb.DataStart, sb.Blocks)
	if err := st.markTier(); err != nil {
		return nil, fmt.Errorf("SSD-tier registry: %w"+fsckHint, err)
	}
	if err := st.scan(m); err != nil {
		return nil, fmt.Errorf("%w"+fsckHint+" for the full list", err)
	}
	return st, nil
}

func (st *State) markTier() error {
	if st.SB.Tier == 0 {
		return nil
	}
	if !st.SB.ValidData(st.SB.Tier, 1) || !st.Free.MarkUsed(st.SB.Tier, 1) {
		return fmt.Errorf("%w: SSD-tier registry block %d is used twice or out of range", format.ErrCorrupt, st.SB.Tier)
	}
	// Its contents are package embedding's: the tier decodes them when it
	// opens, and the checker checks them (DESIGN.md §Embedding tier).
	return nil
}

// scan decodes the inode table, then every directory's entries.
func (st *State) scan(m pmem.Medium) error {
	sb, b := &st.SB, m.Bytes()
	read := func(blk format.Blk, n uint64) []byte { return b[blk.Off() : blk.Off()+format.Off(n)*format.BlockSize] }
	live := map[format.Ino]*Inode{}
	for ino := format.Ino(sb.InodeCount - 1); ino >= 1; ino-- {
		off := sb.InodeOff(ino)
		slot := b[off : off+format.InodeSize]
		if format.IsZero(slot) {
			st.FreeInos = append(st.FreeInos, ino)
			continue
		}
		d, err := format.DecodeInode(slot)
		if err != nil {
			return fmt.Errorf("inode %d (byte %d): %w", ino, off, err)
		}
		in := &Inode{Ino: ino, D: d}
		if err := st.loadExtents(in, read); err != nil {
			return fmt.Errorf("inode %d: %w", ino, err)
		}
		if d.Xattr != 0 {
			xs, nb, err := format.DecodeXattrRegion(d.Xattr, sb.ValidData, read)
			if err != nil {
				return fmt.Errorf("inode %d: %w", ino, err)
			}
			if !st.Free.MarkUsed(d.Xattr, nb) {
				return fmt.Errorf("inode %d: %w: xattr region at block %d is shared", ino, format.ErrCorrupt, d.Xattr)
			}
			in.Xattrs, in.XattrBlocks = xs, nb
		}
		if err := st.loadTable(in, b); err != nil {
			return fmt.Errorf("inode %d: %w", ino, err)
		}
		if err := st.loadSession(in, b); err != nil {
			return fmt.Errorf("inode %d: session: %w", ino, err)
		}
		live[ino] = in
	}
	for ino := format.RootIno; uint64(ino) < sb.InodeCount; ino++ {
		if in := live[ino]; in != nil {
			st.Inodes = append(st.Inodes, in)
		}
	}
	root := live[format.RootIno]
	if root == nil || !root.D.IsDir() {
		return fmt.Errorf("%w: root inode %d is not a directory", format.ErrCorrupt, format.RootIno)
	}
	root.Parent = format.RootIno
	for _, in := range st.Inodes {
		if in.D.IsDir() {
			if err := scanDir(in, live, b); err != nil {
				return fmt.Errorf("directory inode %d: %w", in.Ino, err)
			}
		}
	}
	for _, in := range st.Inodes {
		if in.D.Nlink != 0 {
			continue
		}
		if in.Refs > 0 || in.Ino == format.RootIno {
			st.Misnamed = append(st.Misnamed, in.Ino)
		} else {
			st.Orphans = append(st.Orphans, in.Ino)
		}
	}
	return nil
}

// loadTable decodes a table inode's descriptor header and marks the
// descriptor's blocks used. The rest of the descriptor (the translation
// table) is package embedding's to decode.
func (st *State) loadTable(in *Inode, b []byte) error {
	d := &in.D
	blk := d.TableBlk()
	if d.Flags&format.InodeTable == 0 {
		if blk != 0 {
			return fmt.Errorf("%w: table descriptor %d without the table flag", format.ErrCorrupt, blk)
		}
		return nil
	}
	if d.Mode&format.ModeType != format.ModeReg || len(in.Exts) != 0 || !st.SB.ValidData(blk, 1) {
		return fmt.Errorf("%w: table inode (type %#o, %d extents, descriptor block %d)", format.ErrCorrupt, d.Mode&format.ModeType, len(in.Exts), blk)
	}
	hdr, err := format.DecodeTableHeader(b[blk.Off():])
	if err != nil {
		return fmt.Errorf("table descriptor at block %d: %w", blk, err)
	}
	if !st.SB.ValidData(blk, uint64(hdr.Blocks)) || !st.Free.MarkUsed(blk, uint64(hdr.Blocks)) {
		return fmt.Errorf("%w: table descriptor blocks %d..%d out of range or shared", format.ErrCorrupt, blk, uint64(blk)+uint64(hdr.Blocks)-1)
	}
	if hdr.Size() != d.Size {
		return fmt.Errorf("%w: table size %d, rows x row bytes = %d", format.ErrCorrupt, d.Size, hdr.Size())
	}
	in.Table = &hdr
	return nil
}

// loadSession reads an open session's log (journal/seglog) and marks its
// regions used.
func (st *State) loadSession(in *Inode, b []byte) error {
	f := seglog.FieldsOf(&in.D)
	if !f.Open() || in.D.Mode&format.ModeType == format.ModeDir {
		return nil
	}
	s, err := seglog.Read(seglog.Mapped(&st.SB, b), f)
	if err != nil {
		return err
	}
	for _, r := range s.Layout.Regions() {
		if !st.Free.MarkUsed(r.Phys, r.Len) {
			return fmt.Errorf("the F_log at block %d or the P_log at block %d is used twice", s.Layout.FLog, s.Layout.Header.PLog)
		}
	}
	in.Session = s
	return nil
}

// loadExtents decodes in's extent list (format.DecodeExtents) and marks
// its blocks used.
func (st *State) loadExtents(in *Inode, read func(format.Blk, uint64) []byte) error {
	exts, ovf, err := format.DecodeExtents(&in.D, st.SB.ValidData, func(b format.Blk) []byte { return read(b, 1) })
	if err != nil {
		return err
	}
	for _, b := range ovf {
		if !st.Free.MarkUsed(b, 1) {
			return fmt.Errorf("%w: extent overflow block %d is used twice", format.ErrCorrupt, b)
		}
	}
	for i, e := range exts {
		if !st.Free.MarkUsed(e.Phys, e.Len) {
			return fmt.Errorf("%w: extent %d: pool blocks %d..%d are used twice", format.ErrCorrupt, i, e.Phys, uint64(e.Phys)+e.Len-1)
		}
	}
	in.Exts, in.Ovf = exts, ovf
	return nil
}

// scanDir reads a directory's slots: every used one must name a live
// inode, once per directory, and a directory may have one parent. Only
// mapped blocks are read (a hole reads as free slots), so a damaged size
// cannot make the scan run long.
func scanDir(dir *Inode, live map[format.Ino]*Inode, b []byte) error {
	nb := dir.D.Size / format.BlockSize
	if n := len(dir.Exts); nb > 0 && (n == 0 || dir.Exts[n-1].End() < nb) {
		return fmt.Errorf("%w: directory size %d runs past its last mapped block", format.ErrCorrupt, dir.D.Size)
	}
	names := map[string]bool{}
	for _, e := range dir.Exts {
		for k := e.Logical; k < min(e.End(), nb); k++ {
			phys := e.Phys + format.Blk(k-e.Logical)
			for i := uint64(0); i < format.DirentsPerBlock; i++ {
				s := k*format.DirentsPerBlock + i
				off := phys.Off() + format.Off(i*format.DirentSize)
				de, used, err := format.DecodeDirent(b[off : off+format.DirentSize])
				if err != nil {
					return fmt.Errorf("slot %d (byte %d): %w", s, off, err)
				}
				if !used {
					continue
				}
				child := live[de.Ino]
				if child == nil {
					return fmt.Errorf("entry %q names free inode %d", de.Name, de.Ino)
				}
				if names[de.Name] {
					return fmt.Errorf("entry %q appears twice", de.Name)
				}
				names[de.Name] = true
				child.Refs++
				if child.D.IsDir() {
					if child.Parent != 0 {
						return fmt.Errorf("directory inode %d has two parents (%d and %d)", de.Ino, child.Parent, dir.Ino)
					}
					child.Parent = dir.Ino
				}
				dir.Entries = append(dir.Entries, Entry{Slot: s, Dirent: de})
			}
		}
	}
	return nil
}

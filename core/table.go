package core

import (
	"fmt"

	"go.uber.org/zap"

	"github.com/dnnfs/dnnfs/format"
)

// Extension metadata: an inode may carry a descriptor that belongs to an
// extension of the file system, and the pool may hold one registry block
// for it. Today there is one extension, the SSD tier's embedding tables
// (package embedding): a table inode's descriptor is its shape and
// translation table, the registry lists the SSD-tier devices. The core
// stores, journals and frees these blocks; it reads no more of them than
// the descriptor header's length and file size (format.TableHeader),
// which it needs to account for the blocks and the inode's size. What the
// entries mean, and whether they are valid, is the extension's business.

// ExtKind names the extension an inode's descriptor belongs to. On the
// medium it is the inode's flag (format.InodeTable).
type ExtKind uint8

// ExtTable: an embedding table's descriptor (package embedding).
const ExtTable ExtKind = 1

// tableState is the DRAM half of an inode's descriptor.
type tableState struct {
	desc Blk
	hdr  format.TableHeader
}

// bytes returns the descriptor in the pool (a view, not a copy).
func (t *tableState) bytes(fs *FS) []byte {
	off := t.desc.Off()
	return fs.m.Bytes()[off : off+format.Off(t.hdr.Blocks)*bs]
}

// ExtFreed is called (outside every core lock) after an inode carrying a
// descriptor was freed, with a copy of the descriptor, so the extension
// can reclaim what it names. in identifies the freed inode (its number
// may be reused at once).
type ExtFreed func(in *Inode, kind ExtKind, desc []byte)

// SetExtFreed installs the hook. Call before serving requests.
func (fs *FS) SetExtFreed(f ExtFreed) { fs.extFreed = f }

// Table returns the descriptor header of a table inode, or false if in is
// not a table.
func (in *Inode) Table() (format.TableHeader, bool) {
	t := in.table.Load()
	if t == nil {
		return format.TableHeader{}, false
	}
	return t.hdr, true
}

// IsTable reports whether in is an embedding table.
func (in *Inode) IsTable() bool { return in.table.Load() != nil }

// Tables returns every live table inode.
func (fs *FS) Tables() []*Inode {
	fs.imu.Lock()
	defer fs.imu.Unlock()
	var ts []*Inode
	for _, in := range fs.inodes {
		if in.table.Load() != nil {
			ts = append(ts, in)
		}
	}
	return ts
}

// ExtDesc returns a copy of in's descriptor of the given kind: its header
// and entries, hdr.Blocks blocks.
func (fs *FS) ExtDesc(in *Inode, kind ExtKind) ([]byte, error) {
	t := in.table.Load()
	if t == nil || kind != ExtTable {
		return nil, ErrInvalid
	}
	return append([]byte(nil), t.bytes(fs)...), nil
}

// CreateExt makes the empty regular file in an inode carrying desc, a
// descriptor of the given kind: a whole number of blocks starting with a
// format.TableHeader that says so. The file's size becomes the header's.
// Persist order: the descriptor is written and persisted in blocks
// nothing references; then one transaction points the inode at it.
func (fs *FS) CreateExt(in *Inode, kind ExtKind, desc []byte) error {
	if in.typ != format.ModeReg || kind != ExtTable {
		return ErrInvalid
	}
	hdr, err := format.DecodeTableHeader(desc)
	if err != nil {
		return fmt.Errorf("%w: descriptor: %v", ErrInvalid, err)
	}
	if uint64(len(desc)) != uint64(hdr.Blocks)*uint64(bs) {
		return fmt.Errorf("%w: descriptor of %d bytes, its header says %d blocks", ErrInvalid, len(desc), hdr.Blocks)
	}
	unlock, err := fs.lockWhole(in)
	if err != nil {
		return err
	}
	defer unlock()
	switch {
	case in.table.Load() != nil:
		return fmt.Errorf("%w: already a table", ErrExist)
	case in.sess.Load() != nil:
		return ErrBusy
	case in.d.Size != 0 || len(in.exts) != 0:
		return fmt.Errorf("%w: the file has data; make tables from new, empty files", ErrInvalid)
	}
	c := fs.begin()
	blk, err := c.allocMeta(fs.sb.DataStart, uint64(hdr.Blocks))
	if err != nil {
		c.abort()
		return err
	}
	t := &tableState{desc: blk, hdr: hdr}
	region := t.bytes(fs)
	copy(region, desc)
	if err := fs.m.Persist(int64(blk.Off()), int64(len(region))); err != nil {
		c.abort()
		return ioErr("writing the table descriptor", err)
	}
	nd := in.d
	nd.Flags |= format.InodeTable
	nd.SetTableBlk(blk)
	nd.Size = hdr.Size()
	c.putInode(in, nd)
	if err := c.commit(); err != nil {
		return err
	}
	in.table.Store(t)
	fs.log.Info("embedding table created", zap.Uint64("ino", uint64(in.Ino)), zap.Uint64("rows", hdr.Rows),
		zap.Uint32("dim", hdr.Dim), zap.Uint8("dtype", hdr.Dtype), zap.Uint32("shards", hdr.Shards))
	return nil
}

// WriteExt rewrites bytes [off, off+len(b)) of in's descriptor in one
// transaction (a shard move or replica change). The header stays as it
// is: it fixes the descriptor's length and the file's size.
func (fs *FS) WriteExt(in *Inode, kind ExtKind, off int, b []byte) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	t := in.table.Load()
	if t == nil || kind != ExtTable || off < format.TBHeader || off+len(b) > int(t.hdr.Blocks)*bs {
		return ErrInvalid
	}
	c := fs.begin()
	c.tx.Write(t.desc.Off()+format.Off(off), b)
	return c.commit()
}

// loadTable installs a table inode's descriptor as recovery.Mount
// decoded it.
func (fs *FS) loadTable(in *Inode, hdr *format.TableHeader) {
	if hdr != nil {
		in.table.Store(&tableState{desc: in.d.TableBlk(), hdr: *hdr})
	}
}

// stageFreeTable adds a table's descriptor to a change being freed and
// hands a copy of it to the extension after the commit.
func (c *change) stageFreeTable(in *Inode) {
	t := in.table.Load()
	if t == nil {
		return
	}
	fs := c.fs
	c.freed = append(c.freed, format.Extent{Phys: t.desc, Len: uint64(t.hdr.Blocks)})
	desc := append([]byte(nil), t.bytes(fs)...)
	c.after = append(c.after, func() {
		in.table.Store(nil)
		if fs.extFreed != nil {
			go fs.extFreed(in, ExtTable, desc)
		}
	})
}

// ---------------------------------------------------------------------
// The extension's registry block

// UUID returns the pool's identity.
func (fs *FS) UUID() [16]byte { return fs.sb.UUID }

// Registry returns a copy of the pool's registry block (the SSD-tier
// device registry), nil if the pool has none yet.
func (fs *FS) Registry() []byte {
	fs.tierMu.Lock()
	defer fs.tierMu.Unlock()
	return fs.registryLocked()
}

// registryLocked is Registry.
// Precondition: fs.tierMu is held.
func (fs *FS) registryLocked() []byte {
	if fs.sb.Tier == 0 {
		return nil
	}
	off := fs.sb.Tier.Off()
	return append([]byte(nil), fs.m.Bytes()[off:off+bs]...)
}

// UpdateRegistry replaces the registry block with what f makes of the
// current one (nil if none; f returns one block), updates serialised.
// The first one writes the block into a fresh block and then points the
// superblock at it (primary, then replica); later ones rewrite the block
// in a transaction. An error from f is returned as it is.
func (fs *FS) UpdateRegistry(f func(old []byte) ([]byte, error)) error {
	fs.tierMu.Lock()
	defer fs.tierMu.Unlock()
	buf, err := f(fs.registryLocked())
	if err != nil {
		return err
	}
	if len(buf) != bs {
		return fmt.Errorf("%w: registry of %d bytes, want one block", ErrInvalid, len(buf))
	}
	if fs.sb.Tier != 0 {
		c := fs.begin()
		c.tx.Write(fs.sb.Tier.Off(), buf)
		return c.commit()
	}
	b, ok := fs.alloc.AllocContig(fs.sb.DataStart, 1)
	if !ok {
		return ErrNoSpace
	}
	if err := fs.materialize(b, 1); err != nil {
		fs.alloc.Release(b, 1)
		return err
	}
	copy(fs.m.Bytes()[b.Off():], buf)
	if err := fs.m.Persist(int64(b.Off()), format.BlockSize); err != nil {
		fs.alloc.Release(b, 1)
		return ioErr("writing the SSD-tier registry", err)
	}
	fs.sb.Tier = b
	if err := fs.writeSuperblock(); err != nil {
		// Point the superblocks back to no registry (best effort: the
		// medium is failing) before the block is reused.
		fs.sb.Tier = 0
		_ = fs.writeSuperblock()
		fs.alloc.Release(b, 1)
		return err
	}
	return nil
}

package core

import (
	"errors"
	"fmt"

	"go.uber.org/zap"

	"github.com/dnnfs/dnnfs/format"
	"github.com/dnnfs/dnnfs/lock"
)

// Embedding tables (SEEDS.md §2): the pool keeps what names a table's rows
// (the SSD-tier device registry and each table's descriptor, the
// translation table), package embedding keeps the rows. Every change here
// is a journal transaction like any other metadata change.

// ErrTable: the operation does not apply to an embedding table (its data
// lives on the SSD tier; its size is fixed by rows x dim x dtype).
var ErrTable = errors.New("not possible on an embedding table")

// tableState is the DRAM half of a table inode.
type tableState struct {
	desc Blk
	hdr  format.TableHeader
}

// TableFreed is called (outside every pool lock) after a table inode was
// freed, with the shard locations it held, so the SSD tier can reuse them.
// in identifies the freed inode (its number may be reused at once).
type TableFreed func(in *Inode, hdr format.TableHeader, shards []format.ShardEntry)

// SetTableFreed installs the hook. Call before serving requests.
func (fs *FS) SetTableFreed(f TableFreed) { fs.tableFreed = f }

// Table returns the table header of in, or false if in is not a table.
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

// TableShards decodes the table's translation table from the pool.
func (fs *FS) TableShards(in *Inode) ([]format.ShardEntry, error) {
	t := in.table.Load()
	if t == nil {
		return nil, ErrInvalid
	}
	return fs.decodeShards(t)
}

func (fs *FS) decodeShards(t *tableState) ([]format.ShardEntry, error) {
	ndev := len(fs.tier)
	b := fs.m.Bytes()[t.desc.Off():]
	es := make([]format.ShardEntry, t.hdr.Shards)
	for i := range es {
		e, err := format.DecodeShardEntry(b[format.TBHeader+i*format.ShardEntrySize:], ndev)
		if err != nil {
			return nil, fmt.Errorf("shard %d: %w", i, err)
		}
		es[i] = e
	}
	return es, nil
}

// CreateTable makes the empty regular file in an embedding table with the
// given shape and shard locations (reserved by the caller on the SSD
// tier). Persist order: the descriptor is written and persisted in blocks
// nothing references; then one transaction points the inode at it.
func (fs *FS) CreateTable(in *Inode, hdr format.TableHeader, shards []format.ShardEntry) error {
	if in.typ != format.ModeReg {
		return ErrInvalid
	}
	if len(shards) != int(hdr.Shards) {
		return ErrInvalid
	}
	for i := range shards {
		var buf [format.ShardEntrySize]byte
		shards[i].Encode(buf[:])
		if _, err := format.DecodeShardEntry(buf[:], len(fs.tier)); err != nil {
			return fmt.Errorf("%w: shard %d: %v", ErrInvalid, i, err)
		}
	}
	l, err := fs.lockData(Caller{}, in, 0, 0, lock.Exclusive, true)
	if err != nil {
		return err
	}
	defer in.locks.Release(l)
	in.mu.Lock()
	defer in.mu.Unlock()
	switch {
	case in.table.Load() != nil:
		return fmt.Errorf("%w: already a table", ErrExist)
	case in.sess.Load() != nil:
		return ErrBusy
	case in.d.Size != 0 || len(in.exts) != 0:
		return fmt.Errorf("%w: the file has data; make tables from new, empty files", ErrInvalid)
	}
	c := fs.begin()
	desc, err := c.allocMeta(fs.sb.DataStart, uint64(hdr.Blocks))
	if err != nil {
		c.abort()
		return err
	}
	region := fs.m.Bytes()[desc.Off() : desc.Off()+format.Off(hdr.Blocks)*bs]
	clear(region)
	hdr.Encode(region)
	for i := range shards {
		shards[i].Encode(region[format.TBHeader+i*format.ShardEntrySize:])
	}
	if err := fs.m.Persist(int64(desc.Off()), int64(len(region))); err != nil {
		c.abort()
		return ioErr("writing the table descriptor", err)
	}
	nd := in.d
	nd.Flags |= format.InodeTable
	nd.SetTableBlk(desc)
	nd.Size = hdr.Size()
	c.putInode(in, nd)
	if err := c.commit(); err != nil {
		return err
	}
	in.table.Store(&tableState{desc: desc, hdr: hdr})
	fs.log.Info("embedding table created", zap.Uint64("ino", uint64(in.Ino)), zap.Uint64("rows", hdr.Rows),
		zap.Uint32("dim", hdr.Dim), zap.Uint8("dtype", hdr.Dtype), zap.Uint32("shards", hdr.Shards))
	return nil
}

// SetShard rewrites shard i's translation entry in one transaction (a
// move or a replica change; SEEDS.md §2 migration).
func (fs *FS) SetShard(in *Inode, i int, e format.ShardEntry) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	t := in.table.Load()
	if t == nil || i < 0 || i >= int(t.hdr.Shards) {
		return ErrInvalid
	}
	var buf [format.ShardEntrySize]byte
	e.Encode(buf[:])
	if _, err := format.DecodeShardEntry(buf[:], len(fs.tier)); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	c := fs.begin()
	c.tx.Write(t.desc.Off()+format.TBHeader+format.Off(i)*format.ShardEntrySize, buf[:])
	return c.commit()
}

// loadTable decodes a table inode's descriptor at mount.
func (fs *FS) loadTable(in *Inode) error {
	d := &in.d
	blk := d.TableBlk()
	if d.Flags&format.InodeTable == 0 {
		if blk != 0 {
			return fmt.Errorf("%w: table descriptor %d without the table flag", format.ErrCorrupt, blk)
		}
		return nil
	}
	if in.typ != format.ModeReg || len(in.exts) != 0 || !fs.sb.ValidData(blk, 1) {
		return fmt.Errorf("%w: table inode (type %#o, %d extents, descriptor block %d)", format.ErrCorrupt, in.typ, len(in.exts), blk)
	}
	b := fs.m.Bytes()
	hdr, err := format.DecodeTableHeader(b[blk.Off():])
	if err != nil {
		return fmt.Errorf("table descriptor at block %d: %w", blk, err)
	}
	if !fs.sb.ValidData(blk, uint64(hdr.Blocks)) || !fs.alloc.markUsed(blk, uint64(hdr.Blocks)) {
		return fmt.Errorf("%w: table descriptor blocks %d..%d out of range or shared", format.ErrCorrupt, blk, uint64(blk)+uint64(hdr.Blocks)-1)
	}
	if hdr.Size() != d.Size {
		return fmt.Errorf("%w: table size %d, rows x row bytes = %d", format.ErrCorrupt, d.Size, hdr.Size())
	}
	t := &tableState{desc: blk, hdr: hdr}
	if _, err := fs.decodeShards(t); err != nil {
		return fmt.Errorf("table descriptor at block %d: %w", blk, err)
	}
	in.table.Store(t)
	return nil
}

// stageFreeTable adds a table's descriptor to a change being freed and
// reports its shards to the tier after the commit.
func (c *change) stageFreeTable(in *Inode) {
	t := in.table.Load()
	if t == nil {
		return
	}
	fs := c.fs
	c.freed = append(c.freed, format.Extent{Phys: t.desc, Len: uint64(t.hdr.Blocks)})
	shards, err := fs.decodeShards(t)
	if err != nil {
		fs.log.Error("freeing a table whose descriptor no longer decodes; its SSD space is reclaimed at the next mount",
			zap.Uint64("ino", uint64(in.Ino)), zap.Error(err))
		shards = nil
	}
	c.after = append(c.after, func() {
		in.table.Store(nil)
		if fs.tableFreed != nil && shards != nil {
			go fs.tableFreed(in, t.hdr, shards)
		}
	})
}

// ---------------------------------------------------------------------
// SSD-tier device registry

// TierDevices returns the registered devices; device id k is element k-1.
func (fs *FS) TierDevices() []format.TierDevice {
	fs.tierMu.Lock()
	defer fs.tierMu.Unlock()
	return append([]format.TierDevice(nil), fs.tier...)
}

// UUID returns the pool's identity.
func (fs *FS) UUID() [16]byte { return fs.sb.UUID }

// RegisterTierDevice adds a device to the registry and returns its id.
// The first registration writes the registry block into a fresh block and
// then points the superblock at it (primary, then replica); later ones
// rewrite the block in a transaction.
func (fs *FS) RegisterTierDevice(d format.TierDevice) (format.DevID, error) {
	fs.tierMu.Lock()
	defer fs.tierMu.Unlock()
	if len(fs.tier) >= format.MaxTierDevices {
		return 0, fmt.Errorf("%w: the pool already has %d SSD-tier devices, the most it can register", ErrNoSpace, format.MaxTierDevices)
	}
	devs := append(append([]format.TierDevice(nil), fs.tier...), d)
	buf := make([]byte, format.BlockSize)
	format.EncodeTier(buf, devs)
	if fs.sb.Tier == 0 {
		b, ok := fs.alloc.allocContig(fs.sb.DataStart, 1)
		if !ok {
			return 0, ErrNoSpace
		}
		if err := fs.materialize(b, 1); err != nil {
			fs.alloc.release(b, 1)
			return 0, err
		}
		copy(fs.m.Bytes()[b.Off():], buf)
		if err := fs.m.Persist(int64(b.Off()), format.BlockSize); err != nil {
			fs.alloc.release(b, 1)
			return 0, ioErr("writing the SSD-tier registry", err)
		}
		fs.sb.Tier = b
		if err := fs.writeSuperblock(); err != nil {
			// Point the superblocks back to no registry (best effort:
			// the medium is failing) before the block is reused.
			fs.sb.Tier = 0
			_ = fs.writeSuperblock()
			fs.alloc.release(b, 1)
			return 0, err
		}
	} else {
		c := fs.begin()
		c.tx.Write(fs.sb.Tier.Off(), buf)
		if err := c.commit(); err != nil {
			return 0, err
		}
	}
	fs.tier = devs
	return format.DevID(len(devs)), nil
}

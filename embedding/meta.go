package embedding

import (
	"fmt"

	"github.com/dnnfs/dnnfs/core"
	"github.com/dnnfs/dnnfs/format"
)

// Store is what the SSD tier keeps in the pool through the file-system
// core: each table inode's descriptor (its shape and translation table)
// and the pool's device registry. *core.FS implements it: it stores,
// journals and frees the bytes; this package gives them their meaning
// (format.TableHeader, format.ShardEntry, format.TierDevice) and checks
// them against each other.
type Store interface {
	// ExtDesc returns a copy of in's descriptor.
	ExtDesc(in *core.Inode, kind core.ExtKind) ([]byte, error)
	// CreateExt makes the empty file in a table with descriptor desc.
	CreateExt(in *core.Inode, kind core.ExtKind, desc []byte) error
	// WriteExt rewrites part of in's descriptor (after its header) in
	// one transaction.
	WriteExt(in *core.Inode, kind core.ExtKind, off int, b []byte) error
	// Registry returns a copy of the registry block, nil if none yet.
	Registry() []byte
	// UpdateRegistry replaces the registry block with f's result,
	// updates serialised.
	UpdateRegistry(f func(old []byte) ([]byte, error)) error
}

var _ Store = (*core.FS)(nil)

// Meta reads and writes the SSD tier's metadata in a Store: the device
// registry and the tables' descriptors. It holds no state of its own.
type Meta struct{ S Store }

// TierDevices returns the registered devices; device id k is element k-1.
func (m Meta) TierDevices() ([]format.TierDevice, error) {
	b := m.S.Registry()
	if b == nil {
		return nil, nil
	}
	return format.DecodeTier(b)
}

// RegisterTierDevice adds a device to the registry and returns its id.
func (m Meta) RegisterTierDevice(d format.TierDevice) (format.DevID, error) {
	var id format.DevID
	err := m.S.UpdateRegistry(func(old []byte) ([]byte, error) {
		var devs []format.TierDevice
		if old != nil {
			var err error
			if devs, err = format.DecodeTier(old); err != nil {
				return nil, fmt.Errorf("SSD-tier registry: %w", err)
			}
		}
		if len(devs) >= format.MaxTierDevices {
			return nil, fmt.Errorf("%w: the pool already has %d SSD-tier devices, the most it can register", core.ErrNoSpace, format.MaxTierDevices)
		}
		devs = append(devs, d)
		buf := make([]byte, format.BlockSize)
		format.EncodeTier(buf, devs)
		id = format.DevID(len(devs))
		return buf, nil
	})
	if err != nil {
		return 0, err
	}
	return id, nil
}

// ndev returns how many devices are registered (shard entries name
// devices 1..ndev).
func (m Meta) ndev() (int, error) {
	devs, err := m.TierDevices()
	if err != nil {
		return 0, fmt.Errorf("SSD-tier registry: %w", err)
	}
	return len(devs), nil
}

// EncodeTable builds a table descriptor: the header, then one entry per
// shard, in hdr.Blocks blocks.
func EncodeTable(hdr format.TableHeader, shards []format.ShardEntry) []byte {
	b := make([]byte, int(hdr.Blocks)*format.BlockSize)
	hdr.Encode(b)
	for i := range shards {
		shards[i].Encode(b[format.TBHeader+i*format.ShardEntrySize:])
	}
	return b
}

// DecodeTable decodes a table descriptor whose shard entries may name
// devices 1..ndev.
func DecodeTable(desc []byte, ndev int) (format.TableHeader, []format.ShardEntry, error) {
	hdr, err := format.DecodeTableHeader(desc)
	if err != nil {
		return hdr, nil, err
	}
	if len(desc) < format.TBHeader+int(hdr.Shards)*format.ShardEntrySize {
		return hdr, nil, fmt.Errorf("%w: descriptor of %d bytes, %d shards", format.ErrCorrupt, len(desc), hdr.Shards)
	}
	es := make([]format.ShardEntry, hdr.Shards)
	for i := range es {
		e, err := format.DecodeShardEntry(desc[format.TBHeader+i*format.ShardEntrySize:], ndev)
		if err != nil {
			return hdr, nil, fmt.Errorf("shard %d: %w", i, err)
		}
		es[i] = e
	}
	return hdr, es, nil
}

// checkShard checks that e decodes again with ndev devices registered.
func checkShard(e format.ShardEntry, ndev int) error {
	var buf [format.ShardEntrySize]byte
	e.Encode(buf[:])
	_, err := format.DecodeShardEntry(buf[:], ndev)
	return err
}

// CreateTable makes the empty regular file in an embedding table with
// the given shape and shard locations (reserved by the caller on the SSD
// tier).
func (m Meta) CreateTable(in *core.Inode, hdr format.TableHeader, shards []format.ShardEntry) error {
	if len(shards) != int(hdr.Shards) {
		return core.ErrInvalid
	}
	ndev, err := m.ndev()
	if err != nil {
		return err
	}
	for i, e := range shards {
		if err := checkShard(e, ndev); err != nil {
			return fmt.Errorf("%w: shard %d: %v", core.ErrInvalid, i, err)
		}
	}
	return m.S.CreateExt(in, core.ExtTable, EncodeTable(hdr, shards))
}

// SetShard rewrites shard i's translation entry in one transaction (a
// move or a replica change).
func (m Meta) SetShard(in *core.Inode, i int, e format.ShardEntry) error {
	hdr, ok := in.Table()
	if !ok || i < 0 || i >= int(hdr.Shards) {
		return core.ErrInvalid
	}
	ndev, err := m.ndev()
	if err != nil {
		return err
	}
	if err := checkShard(e, ndev); err != nil {
		return fmt.Errorf("%w: %v", core.ErrInvalid, err)
	}
	var buf [format.ShardEntrySize]byte
	e.Encode(buf[:])
	return m.S.WriteExt(in, core.ExtTable, format.TBHeader+i*format.ShardEntrySize, buf[:])
}

// TableShards decodes the table's translation table.
func (m Meta) TableShards(in *core.Inode) ([]format.ShardEntry, error) {
	desc, err := m.S.ExtDesc(in, core.ExtTable)
	if err != nil {
		return nil, err
	}
	ndev, err := m.ndev()
	if err != nil {
		return nil, err
	}
	_, es, err := DecodeTable(desc, ndev)
	return es, err
}

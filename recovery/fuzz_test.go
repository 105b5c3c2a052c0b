package recovery

import (
	"encoding/binary"
	"strings"
	"sync"
	"testing"

	"github.com/dnnfs/dnnfs/core"
	"github.com/dnnfs/dnnfs/embedding"
	"github.com/dnnfs/dnnfs/format"
	"github.com/dnnfs/dnnfs/pmem"
)

var le2 = binary.LittleEndian

// fuzzSeed is a small populated pool and the places in it worth damaging.
type fuzzSeed struct {
	name    string
	img     []byte
	sb      format.Superblock
	regions [][2]format.Off // metadata byte ranges: superblocks, journal, live inodes, directory, overflow, xattr, log blocks, SSD-tier registry, table descriptors
	inodes  []format.Ino    // live inodes
	tables  []int           // indexes in inodes of the embedding tables
	tier    []int           // indexes in regions of the SSD-tier registry and the table descriptors
	slots   []format.Off    // every slot of every directory block
	scratch []byte          // the damaged copy (one per fuzz worker process)
}

var (
	seedOnce sync.Once
	seeds    []*fuzzSeed
)

// getSeeds builds the seed pools: the populated tree with an open
// session, and the same tree with an SSD-tier registry and embedding
// tables.
func getSeeds(t testing.TB) []*fuzzSeed {
	seedOnce.Do(func() {
		plain := newSeed(t, "pool", func(fs *core.FS) {})
		tables := newSeed(t, "pool with tables", func(fs *core.FS) {
			mustV[format.DevID](t)(embedding.Meta{S: fs}.RegisterTierDevice(format.TierDevice{UUID: [16]byte{1}, Path: "/ssd/a"}))
			mustV[format.DevID](t)(embedding.Meta{S: fs}.RegisterTierDevice(format.TierDevice{UUID: [16]byte{2}, Path: "/ssd/b"}))
			t1 := makeTable(t, fs, "t1", 1000, 16, format.DtypeF32, 300,
				[]format.ShardEntry{{Dev: 1, Off: 4096}, {Dev: 2, Off: 4096}, {Dev: 1, Off: 1 << 20}, {Dev: 2, Off: 1 << 20}})
			must(t, embedding.Meta{S: fs}.SetShard(t1, 2, format.ShardEntry{Dev: 2, Off: 2 << 20, Gen: 1, RDev: 1, ROff: 3 << 20}))
			makeTable(t, fs, "t2", 100, 8, format.DtypeF16, 64, []format.ShardEntry{{Dev: 1, Off: 4 << 20}, {Dev: 2, Off: 4 << 20}})
		})
		if plain != nil && tables != nil {
			seeds = []*fuzzSeed{plain, tables}
		}
	})
	if seeds == nil {
		t.Fatal("no seed pool")
	}
	return seeds
}

func newSeed(t testing.TB, name string, extra func(fs *core.FS)) *fuzzSeed {
	m := pmem.NewMemory(4 << 20)
	must(t, core.Format(m, 0, 0))
	fs, _, err := core.Open(m, core.Options{})
	must(t, err)
	populate(t, fs)
	job, err := fs.Create(fs.Root(), "job", regMode)
	must(t, err)
	must(t, fs.StartSession(job, 3, 6*format.BlockSize, format.SessionWrite))
	mustV[int](t)(fs.WriteAs(core.Caller{TID: 9}, job, 0, pattern(100, 1), false))
	mustV[*core.Inode](t)(fs.Create(fs.Root(), "fifo", core.NewInode{Mode: format.ModeFifo | 0o644}))
	mustV[*core.Inode](t)(fs.Create(fs.Root(), "dev", core.NewInode{Mode: format.ModeBlk | 0o600, Rdev: 8<<8 | 1}))
	extra(fs)
	must(t, fs.Close())
	a, err := analyze(m, false)
	must(t, err)
	if !a.rep.Clean() {
		t.Fatalf("seed %s is not clean:%s", name, problems(a.rep))
	}
	s := &fuzzSeed{name: name, img: m.Bytes(), sb: a.sb}
	add := func(off format.Off, n uint64) { s.regions = append(s.regions, [2]format.Off{off, off + format.Off(n)}) }
	add(0, 2*format.BlockSize)
	add(a.sb.JournalStart.Off(), 2*format.BlockSize)
	for _, in := range a.order {
		if in.d.Flags&format.InodeTable != 0 {
			s.tables = append(s.tables, len(s.inodes))
		}
		s.inodes = append(s.inodes, in.ino)
		add(in.off, format.InodeSize)
		for _, b := range in.ovf {
			add(b.Off(), format.BlockSize)
		}
		if in.d.Xattr != 0 {
			add(in.d.Xattr.Off(), format.BlockSize)
		}
		if in.d.IsDir() {
			for _, e := range in.exts {
				add(e.Phys.Off(), e.Len*format.BlockSize)
				for k := uint64(0); k < e.Len*format.DirentsPerBlock; k++ {
					s.slots = append(s.slots, e.Phys.Off()+format.Off(k/format.DirentsPerBlock*format.BlockSize+k%format.DirentsPerBlock*format.DirentSize))
				}
			}
		}
	}
	for _, c := range a.claims {
		if c.what == "table descriptor" || c.ino == 0 {
			s.tier = append(s.tier, len(s.regions))
		}
		if strings.HasPrefix(c.what, "session") || c.what == "table descriptor" || c.ino == 0 {
			add(c.phys.Off(), c.n*format.BlockSize)
		}
	}
	return s
}

// damage applies the fuzzer's edits, 5 bytes each: kind, then 4 operands.
//
//	kind%4 == 0  XOR a byte of a metadata region
//	kind%4 == 1  change one field of a live inode, re-encoded (valid CRC),
//	             or a table's shard entry (valid CRC)
//	kind%4 == 2  change a directory slot, re-encoded (valid CRC)
//	kind%4 == 3  journal: re-arm the last transaction, or a bad commit word
func (s *fuzzSeed) damage(b []byte, ops []byte) {
	for ; len(ops) >= 5; ops = ops[5:] {
		kind, r, o1, o2, v := ops[0], int(ops[1]), int(ops[2]), int(ops[3]), ops[4]
		switch kind % 4 {
		case 0:
			reg := s.regions[r%len(s.regions)]
			off := reg[0] + format.Off((o1<<8|o2)%int(reg[1]-reg[0]))
			b[off] ^= v | 1
		case 1:
			off := s.sb.InodeOff(s.inodes[r%len(s.inodes)])
			d, err := format.DecodeInode(b[off:])
			if err != nil || d.Mode == 0 {
				continue
			}
			k := o2 % format.InlineExtents
			switch o1 % 14 {
			case 0:
				d.Nlink = uint32(v)
			case 1:
				d.Size = uint64(v) << (o2 % 40)
			case 2:
				d.Mode = []uint32{0o030000, format.ModeReg, format.ModeDir, format.ModeLnk, format.ModeFifo, format.ModeChr}[v%6] | d.Mode&format.ModePerm
			case 3:
				d.Inline[k].Logical += uint64(v)
			case 4:
				d.Inline[k].Phys += format.Blk(int8(v))
			case 5:
				d.Inline[k].Len = uint64(v)
			case 6:
				d.Extents = uint32(v)
			case 7:
				d.Overflow = s.sb.DataStart + format.Blk(v)
			case 8:
				d.Xattr = s.sb.DataStart + format.Blk(v)
			case 9:
				d.Flags = uint32(v)
			case 10:
				d.SetSessionFields(uint32(v%5), uint32(o2%3), s.sb.DataStart+format.Blk(v), uint64(o2)<<12, uint32(o2%3))
			case 11:
				clear(b[off : off+format.InodeSize])
				continue
			case 13:
				d.Rdev = uint32(v)
			case 12:
				blk := d.TableBlk()
				if d.Flags&format.InodeTable == 0 || !s.sb.ValidData(blk, 1) {
					d.SetTableBlk(s.sb.DataStart + format.Blk(v))
					break
				}
				h, err := format.DecodeTableHeader(b[blk.Off():])
				if err != nil || !s.sb.ValidData(blk, uint64(h.Blocks)) {
					continue
				}
				e := format.ShardEntry{Dev: format.DevID(1 + v%2), Off: uint64(1+v/4) * format.BlockSize}
				if v&2 != 0 {
					e.RDev, e.ROff = 3-e.Dev, uint64(1+o2)*format.BlockSize
				}
				e.Encode(b[blk.Off()+format.TBHeader+format.Off(o2%int(h.Shards)*format.ShardEntrySize):])
				continue
			}
			d.Encode(b[off:])
		case 2:
			off := s.slots[r%len(s.slots)]
			de, used, err := format.DecodeDirent(b[off:])
			if err != nil {
				continue
			}
			if !used {
				de = format.Dirent{Name: "new", Type: format.DTReg, Ino: format.Ino(v)}
			}
			switch o1 % 4 {
			case 0:
				de.Ino = format.Ino(v)
			case 1:
				de.Type = v % 12
			case 2:
				if len(de.Name) > 0 {
					n := []byte(de.Name)
					n[o2%len(n)] = v
					de.Name = string(n)
				}
			case 3:
				copy(b[off:off+format.DirentSize], b[s.slots[o2%len(s.slots)]:])
				continue
			}
			if de.Ino == 0 {
				de.Ino = 1 << 40
			}
			de.Encode(b[off:])
		case 3:
			j := s.sb.JournalStart.Off()
			tx := j + format.BlockSize
			switch o1 % 3 {
			case 0: // the last (retired) transaction is pending again: replay is idempotent
				copy(b[j+format.JHCommit:], b[tx+format.TxSeq:tx+format.TxSeq+8])
			case 1:
				le2.PutUint64(b[j+format.JHCommit:], uint64(v)+1)
			case 2:
				copy(b[j+format.JHCommit:], b[tx+format.TxSeq:tx+format.TxSeq+8])
				b[tx+format.Off(format.TxHeader+o2)] ^= v | 1
			}
		}
	}
}

// FuzzCheck damages a populated pool's metadata and requires that Check
// and Repair never panic, that Repair leaves a pool Check finds clean,
// and that the mount code accepts it.
func FuzzCheck(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0, 0, 0, 100, 0xff})                            // primary superblock
	f.Add([]byte{0, 2, 0, 0, 1, 0, 3, 0, 9, 4})                  // inode bytes
	f.Add([]byte{1, 1, 0, 0, 7})                                 // root link count
	f.Add([]byte{1, 2, 11, 0, 0})                                // free an inode
	f.Add([]byte{1, 3, 4, 1, 200, 1, 4, 7, 0, 0})                // extents
	f.Add([]byte{1, 30, 10, 3, 40})                              // session fields
	f.Add([]byte{2, 1, 0, 0, 3, 2, 5, 3, 1, 0})                  // dirents
	f.Add([]byte{2, 16, 3, 2, 0, 2, 17, 3, 3, 0})                // duplicated slots
	f.Add([]byte{3, 0, 0, 0, 0})                                 // re-armed transaction
	f.Add([]byte{3, 0, 2, 10, 0x40, 3, 0, 1, 0, 9})              // damaged transaction
	f.Add([]byte{0, 0, 1, 0, 1, 0, 1, 2, 0, 1})                  // both superblocks
	f.Add([]byte{1, 4, 8, 0, 3, 1, 5, 7, 0, 2, 2, 40, 2, 1, 47}) // mixed
	// The pool with tables: its first table's fields and shard entries,
	// its registry and descriptors (the plain pool gets the same edits).
	ts := getSeeds(f)[1]
	tab := byte(ts.tables[0])
	f.Add([]byte{1, tab, 12, 1, 0})                  // shard 1 over shard 0
	f.Add([]byte{1, tab, 12, 2, 6})                  // a replica
	f.Add([]byte{1, tab, 9, 0, 0})                   // table flag cleared
	f.Add([]byte{1, tab, 1, 3, 1})                   // table size
	f.Add([]byte{1, tab, 9, 0, 0, 1, tab, 12, 0, 5}) // no longer a table, names another descriptor
	f.Add([]byte{1, byte(ts.tables[1]), 12, 1, 0})   // the second table over the first
	for _, i := range ts.tier {
		f.Add([]byte{0, byte(i), 0, 10, 4}) // registry count, or a descriptor's rows
		f.Add([]byte{0, byte(i), 0, 70, 4}) // registry device 1, or a descriptor's shard 0
	}
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) > 100 {
			ops = ops[:100]
		}
		for _, s := range getSeeds(t) {
			s.fuzz(t, ops)
		}
	})
}

func (s *fuzzSeed) fuzz(t *testing.T, ops []byte) {
	if s.scratch == nil {
		s.scratch = make([]byte, len(s.img))
	}
	copy(s.scratch, s.img)
	m := sliceMedium(s.scratch)
	s.damage(m, ops)
	r, cerr := Check(m)
	rr, rerr := Repair(m)
	if cerr != nil {
		if rerr == nil {
			t.Fatalf("%s: Check failed (%v) but Repair succeeded", s.name, cerr)
		}
		return
	}
	if rerr != nil {
		t.Fatalf("%s: Repair: %v\nbefore:%s", s.name, rerr, problems(r))
	}
	if bad := rr.Unrepairable(); len(bad) > 0 || !rr.Clean() {
		t.Fatalf("%s: after Repair:%s\nrepaired: %q\nbefore:%s", s.name, problems(rr), rr.Repaired, problems(r))
	}
	after, err := Check(m)
	if err != nil || !after.Clean() {
		t.Fatalf("%s: Check after Repair: %v%s", s.name, err, problems(after))
	}
	fs, _, err := core.Open(m, core.Options{})
	if err != nil {
		t.Fatalf("%s: core.Open after Repair (Check is clean): %v\nrepaired: %q\nbefore:%s", s.name, err, rr.Repaired, problems(r))
	}
	must(t, fs.Close())
}

package recovery

import (
	"encoding/binary"
	"strings"
	"sync"
	"testing"

	"github.com/dnnfs/dnnfs/format"
	"github.com/dnnfs/dnnfs/pmem"
	"github.com/dnnfs/dnnfs/pool"
)

var le2 = binary.LittleEndian

// fuzzSeed is a small populated pool and the places in it worth damaging.
type fuzzSeed struct {
	img     []byte
	sb      format.Superblock
	regions [][2]format.Off // metadata byte ranges: superblocks, journal, live inodes, directory, overflow, xattr, log blocks
	inodes  []format.Ino    // live inodes
	slots   []format.Off    // every slot of every directory block
}

var (
	seedOnce sync.Once
	seed     *fuzzSeed
	scratch  []byte
)

func getSeed(t testing.TB) *fuzzSeed {
	seedOnce.Do(func() {
		m := pmem.NewMemory(4 << 20)
		must(t, pool.Format(m, 0, 0))
		fs, _, err := pool.Open(m, pool.Options{})
		must(t, err)
		populate(t, fs)
		job, err := fs.Create(fs.Root(), "job", regMode)
		must(t, err)
		must(t, fs.StartSession(job, 3, 6*format.BlockSize, format.SessionWrite))
		mustV[int](t)(fs.WriteAs(pool.Caller{TID: 9}, job, 0, pattern(100, 1), false))
		must(t, fs.Close())
		a, err := analyze(m, false)
		must(t, err)
		if !a.rep.Clean() {
			t.Fatalf("seed pool is not clean:%s", problems(a.rep))
		}
		s := &fuzzSeed{img: m.Bytes(), sb: a.sb}
		add := func(off format.Off, n uint64) { s.regions = append(s.regions, [2]format.Off{off, off + format.Off(n)}) }
		add(0, 2*format.BlockSize)
		add(a.sb.JournalStart.Off(), 2*format.BlockSize)
		for _, in := range a.order {
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
			if strings.HasPrefix(c.what, "session") {
				add(c.phys.Off(), c.n*format.BlockSize)
			}
		}
		seed = s
	})
	if seed == nil {
		t.Fatal("no seed pool")
	}
	return seed
}

// damage applies the fuzzer's edits, 5 bytes each: kind, then 4 operands.
//
//	kind%4 == 0  XOR a byte of a metadata region
//	kind%4 == 1  change one field of a live inode, re-encoded (valid CRC)
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
			switch o1 % 12 {
			case 0:
				d.Nlink = uint32(v)
			case 1:
				d.Size = uint64(v) << (o2 % 40)
			case 2:
				d.Mode = []uint32{0o010000, format.ModeReg, format.ModeDir, format.ModeLnk}[v%4] | d.Mode&format.ModePerm
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
	f.Fuzz(func(t *testing.T, ops []byte) {
		s := getSeed(t)
		if len(ops) > 100 {
			ops = ops[:100]
		}
		if scratch == nil {
			scratch = make([]byte, len(s.img)) // one per fuzz worker process
		}
		copy(scratch, s.img)
		m := sliceMedium(scratch)
		s.damage(m, ops)
		r, cerr := Check(m)
		rr, rerr := Repair(m)
		if cerr != nil {
			if rerr == nil {
				t.Fatalf("Check failed (%v) but Repair succeeded", cerr)
			}
			return
		}
		if rerr != nil {
			t.Fatalf("Repair: %v\nbefore:%s", rerr, problems(r))
		}
		if bad := rr.Unrepairable(); len(bad) > 0 || !rr.Clean() {
			t.Fatalf("after Repair:%s\nrepaired: %q\nbefore:%s", problems(rr), rr.Repaired, problems(r))
		}
		after, err := Check(m)
		if err != nil || !after.Clean() {
			t.Fatalf("Check after Repair: %v%s", err, problems(after))
		}
		fs, _, err := pool.Open(m, pool.Options{})
		if err != nil {
			t.Fatalf("pool.Open after Repair (Check is clean): %v\nrepaired: %q\nbefore:%s", err, rr.Repaired, problems(r))
		}
		must(t, fs.Close())
	})
}

package recovery

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/dnnfs/dnnfs/core"
	"github.com/dnnfs/dnnfs/embedding"
	"github.com/dnnfs/dnnfs/format"
	"github.com/dnnfs/dnnfs/pmem"
)

// makeTable turns a new file into an embedding table through the pool API.
func makeTable(t testing.TB, fs *core.FS, name string, rows uint64, dim uint32, dt uint8, shardRows uint64, shards []format.ShardEntry) *core.Inode {
	t.Helper()
	in := mustV[*core.Inode](t)(fs.Create(fs.Root(), name, regMode))
	hdr, err := format.NewTableHeader(rows, dim, dt, shardRows)
	must(t, err)
	must(t, embedding.Meta{S: fs}.CreateTable(in, hdr, shards))
	return in
}

// tablePool formats a pool with two SSD-tier devices and two tables:
//
//	/t1     1000 rows x 16 f32 (64 B), 300 rows per shard: 4 shards of
//	        5, 5, 5 and 2 blocks; shard 2 moved to device 2 with a replica
//	        on device 1
//	/t2     100 rows x 8 f16, 64 rows per shard: 2 one-block shards
//	/plain  a regular file with 2 blocks of data
func tablePool(t testing.TB) (pmem.Medium, map[string]format.Ino) {
	m := pmem.NewMemory(testPoolSize)
	must(t, core.Format(m, 0, 0))
	fs, _, err := core.Open(m, core.Options{})
	must(t, err)
	mustV[format.DevID](t)(embedding.Meta{S: fs}.RegisterTierDevice(format.TierDevice{UUID: [16]byte{1}, Path: "/ssd/a"}))
	mustV[format.DevID](t)(embedding.Meta{S: fs}.RegisterTierDevice(format.TierDevice{UUID: [16]byte{2}, Path: "/ssd/b"}))
	ino := map[string]format.Ino{}
	t1 := makeTable(t, fs, "t1", 1000, 16, format.DtypeF32, 300,
		[]format.ShardEntry{{Dev: 1, Off: 4096}, {Dev: 2, Off: 4096}, {Dev: 1, Off: 1 << 20}, {Dev: 2, Off: 1 << 20}})
	must(t, embedding.Meta{S: fs}.SetShard(t1, 2, format.ShardEntry{Dev: 2, Off: 2 << 20, Gen: 1, RDev: 1, ROff: 3 << 20}))
	ino["/t1"] = t1.Ino
	ino["/t2"] = makeTable(t, fs, "t2", 100, 8, format.DtypeF16, 64,
		[]format.ShardEntry{{Dev: 1, Off: 4 << 20}, {Dev: 2, Off: 4 << 20}}).Ino
	plain := mustV[*core.Inode](t)(fs.Create(fs.Root(), "plain", regMode))
	mustV[int](t)(fs.Write(plain, 0, pattern(5000, 4), false))
	ino["/plain"] = plain.Ino
	must(t, fs.Close())
	return m, ino
}

// shardOff is the pool byte offset of shard i's entry in table ino.
func shardOff(t testing.TB, m pmem.Medium, ino format.Ino, i int) format.Off {
	d, _ := getInode(t, m, ino)
	return d.TableBlk().Off() + format.TBHeader + format.Off(i*format.ShardEntrySize)
}

func putShard(t testing.TB, m pmem.Medium, ino format.Ino, i int, e format.ShardEntry) {
	e.Encode(m.Bytes()[shardOff(t, m, ino, i):])
}

// isTable mounts a copy and reports whether path is a table, and its size.
func isTable(t testing.TB, m pmem.Medium, path string) (bool, uint64) {
	t.Helper()
	fs, in := mountLookup(t, m, path)
	defer fs.Close()
	return in.IsTable(), in.Attr().Size
}

func TestTablesAreClean(t *testing.T) {
	m, _ := tablePool(t)
	r := requireClean(t, m)
	if r.Tables != 2 || r.TierDevices != 2 {
		t.Fatalf("report: %d tables, %d devices", r.Tables, r.TierDevices)
	}
	fs, _, err := core.Open(clone(m), core.Options{})
	must(t, err)
	st := fs.Statfs()
	if st.Blocks-st.Free != r.UsedBlocks {
		t.Errorf("pool counts %d used blocks, Check %d", st.Blocks-st.Free, r.UsedBlocks)
	}
	must(t, fs.Close())
	// registry + 2 descriptors + the root's directory block + /plain
	if r.UsedBlocks != 1+2+1+2 {
		t.Errorf("%d used blocks", r.UsedBlocks)
	}
	before := bytes.Clone(m.Bytes())
	rr, err := Repair(m)
	must(t, err)
	if len(rr.Repaired) != 0 || !rr.Clean() || !bytes.Equal(before, m.Bytes()) {
		t.Fatalf("Repair of a clean pool: %q%s", rr.Repaired, problems(rr))
	}
}

func TestTierRegistryAloneIsClean(t *testing.T) {
	m := pmem.NewMemory(testPoolSize)
	must(t, core.Format(m, 0, 0))
	fs, _, err := core.Open(m, core.Options{})
	must(t, err)
	mustV[format.DevID](t)(embedding.Meta{S: fs}.RegisterTierDevice(format.TierDevice{UUID: [16]byte{7}, Path: "/ssd/x"}))
	must(t, fs.Close())
	if superOf(t, m).Tier == 0 {
		t.Fatal("no registry")
	}
	r := requireClean(t, m)
	if r.TierDevices != 1 || r.Tables != 0 || r.UsedBlocks != 1 {
		t.Fatalf("report %+v", r)
	}
	requireMount(t, m)
}

func TestShardEntryChecksum(t *testing.T) {
	m, ino := tablePool(t)
	used := check(t, m).UsedBlocks
	m.Bytes()[shardOff(t, m, ino["/t1"], 1)+format.SEOff+1] ^= 0x10
	r := check(t, m)
	requireProblem(t, r, fmt.Sprintf("inode %d", ino["/t1"]), "shard 1: checksum mismatch", "Repair clears the table", "SSD tier are lost")
	if len(r.Problems) != 1 {
		t.Fatalf("want one problem:%s", problems(r))
	}
	rr := repairClean(t, m)
	if rr.Tables != 1 || rr.UsedBlocks != used-1 {
		t.Fatalf("after repair: %d tables, %d used blocks (was %d)", rr.Tables, rr.UsedBlocks, used)
	}
	d, _ := getInode(t, m, ino["/t1"])
	if d.Flags&format.InodeTable != 0 || d.TableBlk() != 0 || d.Size != 0 {
		t.Fatalf("t1 after repair: flags %#x, table %d, size %d", d.Flags, d.TableBlk(), d.Size)
	}
	if tab, _ := isTable(t, m, "/t1"); tab {
		t.Fatal("t1 is still a table")
	}
	if tab, size := isTable(t, m, "/t2"); !tab || size != 100*16 {
		t.Fatalf("t2: table %v, size %d", tab, size)
	}
}

func TestShardOverlapAcrossTables(t *testing.T) {
	m, ino := tablePool(t)
	// t2's shard 1 (one block) lands inside t1's shard 0 on device 1.
	putShard(t, m, ino["/t2"], 1, format.ShardEntry{Dev: 1, Off: 3 * format.BlockSize})
	r := check(t, m)
	requireProblem(t, r, fmt.Sprintf("inode %d", ino["/t2"]), "shard 1's primary copy (device 1, bytes 12288..16383)",
		fmt.Sprintf("overlaps inode %d's shard 0's primary copy (device 1, bytes 4096..24575)", ino["/t1"]), "SSD tier are lost")
	if len(r.Problems) != 1 {
		t.Fatalf("want one problem:%s", problems(r))
	}
	rr := repairClean(t, m)
	if rr.Tables != 1 {
		t.Fatalf("%d tables after repair", rr.Tables)
	}
	if tab, _ := isTable(t, m, "/t1"); !tab {
		t.Fatal("the lower-numbered table t1 was cleared")
	}
	if tab, _ := isTable(t, m, "/t2"); tab {
		t.Fatal("t2 is still a table")
	}
}

func TestShardOverlapLowerTableDamaged(t *testing.T) {
	m, ino := tablePool(t)
	fs, _, err := core.Open(m, core.Options{})
	must(t, err)
	// Inside t1's shard 1 on device 2.
	t3 := makeTable(t, fs, "t3", 10, 4, format.DtypeF32, 10, []format.ShardEntry{{Dev: 2, Off: 3 * format.BlockSize}})
	must(t, fs.Close())
	requireProblem(t, check(t, m), fmt.Sprintf("inode %d", t3.Ino), fmt.Sprintf("overlaps inode %d's shard 1's primary copy", ino["/t1"]))
	// t1 is damaged too: it is cleared for that, and t3 has nothing to
	// give way to.
	m.Bytes()[shardOff(t, m, ino["/t1"], 3)+format.SECRC] ^= 1
	r := check(t, m)
	requireProblem(t, r, fmt.Sprintf("inode %d", ino["/t1"]), "shard 3: checksum mismatch")
	if len(r.Problems) != 1 {
		t.Fatalf("want one problem:%s", problems(r))
	}
	if rr := repairClean(t, m); rr.Tables != 2 {
		t.Fatalf("%d tables after repair", rr.Tables)
	}
	if tab, _ := isTable(t, m, "/t3"); !tab {
		t.Fatal("t3 was cleared")
	}
}

func TestShardOverlapReplicaAndOwn(t *testing.T) {
	m, ino := tablePool(t)
	fs, _, err := core.Open(m, core.Options{})
	must(t, err)
	// t3's shard 1 has a replica on device 1 over its own shard 0.
	t3 := makeTable(t, fs, "t3", 20, 4, format.DtypeF32, 10,
		[]format.ShardEntry{{Dev: 1, Off: 8 << 20}, {Dev: 2, Off: 8 << 20, RDev: 1, ROff: 8 << 20}})
	// t4's replica is on t2's shard 0.
	t4 := makeTable(t, fs, "t4", 10, 4, format.DtypeF32, 10,
		[]format.ShardEntry{{Dev: 2, Off: 9 << 20, RDev: 1, ROff: 4 << 20}})
	must(t, fs.Close())
	r := check(t, m)
	requireProblem(t, r, fmt.Sprintf("inode %d", t3.Ino), "shard 1's replica copy (device 1, bytes 8388608..8392703) overlaps its own shard 0's primary copy")
	requireProblem(t, r, fmt.Sprintf("inode %d", t4.Ino), "shard 0's replica copy (device 1, bytes 4194304..4198399)",
		fmt.Sprintf("overlaps inode %d's shard 0's primary copy", ino["/t2"]))
	if len(r.Problems) != 2 {
		t.Fatalf("want two problems:%s", problems(r))
	}
	if rr := repairClean(t, m); rr.Tables != 2 {
		t.Fatalf("%d tables after repair", rr.Tables)
	}
}

func TestTableSizeDisagrees(t *testing.T) {
	m, ino := tablePool(t)
	d, _ := getInode(t, m, ino["/t2"])
	d.Size = 5
	putInode(t, m, ino["/t2"], d)
	r := check(t, m)
	requireProblem(t, r, fmt.Sprintf("inode %d", ino["/t2"]), "embedding table size 5", "100 rows of 16 bytes (1600)", "sets the size")
	if len(r.Problems) != 1 {
		t.Fatalf("want one problem:%s", problems(r))
	}
	repairClean(t, m)
	if tab, size := isTable(t, m, "/t2"); !tab || size != 1600 {
		t.Fatalf("t2 after repair: table %v, size %d", tab, size)
	}
}

func TestTableFieldsAndFlags(t *testing.T) {
	m, ino := tablePool(t)
	sb := superOf(t, m)
	// A plain file naming a descriptor.
	d, _ := getInode(t, m, ino["/plain"])
	d.SetTableBlk(sb.DataStart + 100)
	putInode(t, m, ino["/plain"], d)
	// The root flagged as a table.
	d, _ = getInode(t, m, format.RootIno)
	d.Flags |= format.InodeTable
	putInode(t, m, format.RootIno, d)
	// A table with extents.
	d, _ = getInode(t, m, ino["/t2"])
	d.Extents, d.Inline[0] = 1, format.Extent{Logical: 0, Phys: sb.DataStart + 200, Len: 1}
	putInode(t, m, ino["/t2"], d)
	// A table whose descriptor header is damaged.
	d, _ = getInode(t, m, ino["/t1"])
	m.Bytes()[d.TableBlk().Off()+format.TBRows] ^= 1
	r := check(t, m)
	requireProblem(t, r, fmt.Sprintf("inode %d", ino["/plain"]), fmt.Sprintf("names a table descriptor at block %d but is not an embedding table", sb.DataStart+100))
	requireProblem(t, r, "inode 1 ", "a directory cannot be an embedding table", "Repair clears the flag")
	requireProblem(t, r, fmt.Sprintf("inode %d", ino["/t2"]), "maps pool blocks (1 extents)", "the file keeps its blocks")
	requireProblem(t, r, fmt.Sprintf("inode %d", ino["/t1"]), "table descriptor at block", "checksum mismatch", "empty regular file")
	if len(r.Problems) != 4 {
		t.Fatalf("want four problems:%s", problems(r))
	}
	if rr := repairClean(t, m); rr.Tables != 0 {
		t.Fatalf("%d tables after repair", rr.Tables)
	}
	d, _ = getInode(t, m, ino["/plain"])
	if d.TableBlk() != 0 || d.Size != 5000 {
		t.Fatalf("plain after repair: table %d, size %d", d.TableBlk(), d.Size)
	}
}

func TestTableDescriptorShared(t *testing.T) {
	m, ino := tablePool(t)
	d, _ := getInode(t, m, ino["/t1"])
	desc := d.TableBlk()
	d, _ = getInode(t, m, ino["/plain"])
	d.Inline[0].Phys, d.Inline[0].Len = desc, 1
	putInode(t, m, ino["/plain"], d)
	r := check(t, m)
	requireProblem(t, r, fmt.Sprintf("inode %d", ino["/t1"]), fmt.Sprintf("table descriptor (pool block %d) overlaps inode %d's extent 0", desc, ino["/plain"]))
	repairClean(t, m)
	if tab, _ := isTable(t, m, "/t1"); tab {
		t.Fatal("t1 is still a table")
	}
}

func TestTierRegistryDamaged(t *testing.T) {
	m, ino := tablePool(t)
	used := check(t, m).UsedBlocks
	tier := superOf(t, m).Tier
	m.Bytes()[tier.Off()+format.TREntries+format.TDPath] ^= 1
	r := check(t, m)
	requireProblem(t, r, "SSD-tier registry", fmt.Sprintf("block %d: checksum mismatch", tier), "zeroes the superblock's pointer")
	for _, name := range []string{"/t1", "/t2"} {
		requireProblem(t, r, fmt.Sprintf("inode %d", ino[name]), "shard 0: corrupt structure: device 1 (0 registered)", "registry is damaged", "SSD tier are lost")
	}
	if len(r.Problems) != 3 || r.Tables != 0 || r.TierDevices != 0 {
		t.Fatalf("report %+v:%s", r, problems(r))
	}
	rr := repairClean(t, m)
	if rr.UsedBlocks != used-3 {
		t.Fatalf("used blocks %d -> %d", used, rr.UsedBlocks)
	}
	for _, blk := range []format.Blk{format.SuperPrimary, format.SuperReplica} {
		sb, err := format.DecodeSuperblock(m.Bytes()[blk.Off():], m.Size())
		must(t, err)
		if sb.Tier != 0 {
			t.Fatalf("superblock %d still names the registry", blk)
		}
	}
	if !strings.Contains(strings.Join(rr.Repaired, "\n"), "dropped the SSD-tier registry") {
		t.Fatalf("repaired %q", rr.Repaired)
	}
}

func TestTierRegistryShared(t *testing.T) {
	m, ino := tablePool(t)
	tier := superOf(t, m).Tier
	d, _ := getInode(t, m, ino["/plain"])
	d.Inline[0].Phys, d.Inline[0].Len = tier, 1
	putInode(t, m, ino["/plain"], d)
	r := check(t, m)
	requireProblem(t, r, "SSD-tier registry", fmt.Sprintf("SSD-tier registry block (pool block %d) overlaps inode %d's extent 0", tier, ino["/plain"]))
	repairClean(t, m)
	// A descriptor on the registry's block gives way to the registry.
	m, ino = tablePool(t)
	tier = superOf(t, m).Tier
	d, _ = getInode(t, m, ino["/t2"])
	d.SetTableBlk(tier)
	putInode(t, m, ino["/t2"], d)
	r = check(t, m)
	requireProblem(t, r, fmt.Sprintf("inode %d", ino["/t2"]), "table descriptor at block")
	repairClean(t, m)
}

// TestTierRepairIsCrashSafe crashes a Repair that drops the registry and
// clears tables after every fence.
func TestTierRepairIsCrashSafe(t *testing.T) {
	m, ino := tablePool(t)
	m.Bytes()[superOf(t, m).Tier.Off()+format.TRCount] ^= 1
	m.Bytes()[shardOff(t, m, ino["/t1"], 0)] ^= 1
	rec := pmem.NewRecorder(m.Bytes())
	r, err := Repair(rec)
	must(t, err)
	if !r.Clean() {
		t.Fatalf("not clean:%s", problems(r))
	}
	n := rec.Fences()
	for k := 0; k <= n; k++ {
		img := sliceMedium(rec.Image(k))
		if _, err := Check(img); err != nil {
			t.Fatalf("crash after fence %d/%d of Repair: Check: %v", k, n, err)
		}
		rr, err := Repair(img)
		if err != nil || !rr.Clean() {
			t.Fatalf("crash after fence %d/%d of Repair, then Repair: %v%s", k, n, err, problems(rr))
		}
		fs, _, err := core.Open(img, core.Options{})
		if err != nil {
			t.Fatalf("crash after fence %d/%d of Repair, Repair again, mount: %v", k, n, err)
		}
		must(t, fs.Close())
	}
}

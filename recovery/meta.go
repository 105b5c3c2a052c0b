package recovery

import (
	"encoding/binary"
	"fmt"
	"sort"
	"strings"

	"github.com/dnnfs/dnnfs/format"
	"github.com/dnnfs/dnnfs/journal"
	"github.com/dnnfs/dnnfs/pmem"
)

var le = binary.LittleEndian

const (
	primaryName = "superblock primary (block 0)"
	replicaName = "superblock replica (block 1)"
)

// errText is err's message without the structure prefix the decoders add.
func errText(err error, prefix string) string {
	return strings.TrimPrefix(err.Error(), prefix)
}

// readSuperblocks decodes both copies (format.DecodeSuperblockPair, as
// the mount does). sb is the one to use; problems describe a bad or
// disagreeing copy.
func readSuperblocks(m pmem.Medium) (sb format.Superblock, useReplica bool, probs []Problem, err error) {
	pair, err := format.DecodeSuperblockPair(m.Bytes(), m.Size())
	if err != nil {
		return sb, false, nil, err
	}
	p, r := &pair.Primary, &pair.Replica
	switch {
	case pair.PrimaryErr != nil:
		probs = append(probs, Problem{Structure: primaryName, Blk: format.SuperPrimary, Off: format.SuperPrimary.Off(),
			What: errText(pair.PrimaryErr, "superblock: ") + "; replica is good", Repairable: true})
		return *r, true, probs, nil
	case pair.ReplicaErr != nil:
		probs = append(probs, Problem{Structure: replicaName, Blk: format.SuperReplica, Off: format.SuperReplica.Off(),
			What: errText(pair.ReplicaErr, "superblock: ") + "; primary is good", Repairable: true})
	case !format.SameGeometry(p, r):
		probs = append(probs, Problem{Structure: replicaName, Blk: format.SuperReplica, Off: format.SuperReplica.Off(),
			What: fmt.Sprintf("geometry or identity differs from the primary's (%s); the primary is used", geometryString(r)), Repairable: true})
	}
	return *p, false, probs, nil
}

func geometryString(sb *format.Superblock) string {
	return fmt.Sprintf("%d blocks, journal %d+%d, %d inodes at %d, data at %d",
		sb.Blocks, sb.JournalStart, sb.JournalLen, sb.InodeCount, sb.InodeStart, sb.DataStart)
}

// repairSuperblocks rewrites a bad or disagreeing copy from the good one.
// The superblocks lie before the journal region, where no transaction
// record may point, so this is a direct store: the good copy is untouched
// until the bad one is whole, so a crash at any point leaves one good copy.
func repairSuperblocks(m pmem.Medium) (format.Superblock, []string, error) {
	sb, useReplica, probs, err := readSuperblocks(m)
	if err != nil {
		return sb, nil, err
	}
	if len(probs) == 0 {
		return sb, nil, nil
	}
	dst, name, from := format.SuperReplica, replicaName, "primary"
	if useReplica {
		dst, name, from = format.SuperPrimary, primaryName, "replica"
	}
	b := m.Bytes()
	sb.Encode(b[dst.Off():])
	if err := m.Persist(int64(dst.Off()), format.SuperSize); err != nil {
		return sb, nil, fmt.Errorf("%s: rewriting from the %s: %w", name, from, err)
	}
	return sb, []string{fmt.Sprintf("%s: %s: rewritten from the %s", name, probs[0].What, from)}, nil
}

// ---------------------------------------------------------------------
// Journal

// rec is one pending store: a journal record, or a change Repair makes.
type rec struct {
	off  format.Off
	data []byte
}

func journalName(sb *format.Superblock) string {
	return fmt.Sprintf("journal (block %d)", sb.JournalStart)
}

// readJournal parses the journal header and, if the commit word names a
// transaction, decodes and validates it exactly as a replay does
// (format.DecodeTx). recs are the records to overlay; probs a damaged
// header or transaction.
func readJournal(m pmem.Medium, sb *format.Superblock) (pending bool, recs []rec, probs []Problem) {
	start := sb.JournalStart.Off()
	length := sb.JournalLen * format.BlockSize
	r := m.Bytes()[start : uint64(start)+length]
	name := journalName(sb)
	if got := le.Uint64(r[format.JHMagic:]); got != format.JournalMagic {
		probs = append(probs, Problem{Structure: name, Blk: sb.JournalStart, Off: start,
			What: fmt.Sprintf("bad magic %#x: not a journal header; Repair rewrites an empty journal (a committed transaction, if any, is lost)", got), Repairable: true})
		return false, nil, probs
	}
	seq := le.Uint64(r[format.JHCommit:])
	if seq == 0 {
		return false, nil, nil
	}
	txRecs, err := format.DecodeTx(r[format.BlockSize:], seq, uint64(start)+length, uint64(m.Size()))
	if err != nil {
		what := fmt.Sprintf("committed transaction %d is damaged: %v", seq, err) +
			"; Repair discards it (the metadata change it carried may be lost or half applied)"
		return true, nil, []Problem{{Structure: name, Blk: sb.JournalStart + 1, Off: start + format.BlockSize, What: what, Repairable: true}}
	}
	for _, t := range txRecs {
		recs = append(recs, rec{t.Off, t.Data})
	}
	return true, recs, nil
}

// repairJournal rewrites a journal header without magic, replays a
// committed transaction, or discards a damaged one, and returns the
// journal to commit repairs through.
func repairJournal(m pmem.Medium, sb *format.Superblock) (*journal.Journal, []string, error) {
	var done []string
	_, _, probs := readJournal(m, sb)
	start := sb.JournalStart.Off()
	if le.Uint64(m.Bytes()[start+format.JHMagic:]) != format.JournalMagic {
		if err := journal.Format(m, sb); err != nil {
			return nil, done, fmt.Errorf("%s: %w", journalName(sb), err)
		}
		done = append(done, journalName(sb)+": "+probs[0].What+": rewrote an empty journal")
		probs = nil
	}
	j, err := journal.Open(m, sb)
	if err != nil {
		return nil, done, err
	}
	if !j.Pending() {
		return j, done, nil
	}
	if len(probs) > 0 {
		// Damaged: retire it without applying anything.
		if err := j.Discard(); err != nil {
			return nil, done, fmt.Errorf("%s: %w", journalName(sb), err)
		}
		return j, append(done, journalName(sb)+": "+probs[0].What), nil
	}
	seq := le.Uint64(m.Bytes()[start+format.JHCommit:])
	n, err := j.Replay()
	if err != nil {
		return nil, done, fmt.Errorf("journal replay: %w", err)
	}
	return j, append(done, fmt.Sprintf("%s: replayed committed transaction %d (%d records)", journalName(sb), seq, n)), nil
}

// ---------------------------------------------------------------------
// view: the pool as it is after replaying the overlay records.

type view struct {
	b      []byte
	recs   []orec // sorted by offset
	maxLen uint64
}

type orec struct {
	rec
	seq int // position in the transaction: later records win
}

func newView(b []byte, recs []rec) *view {
	v := &view{b: b}
	for i, r := range recs {
		if len(r.data) == 0 {
			continue
		}
		v.recs = append(v.recs, orec{r, i})
		v.maxLen = max(v.maxLen, uint64(len(r.data)))
	}
	sort.SliceStable(v.recs, func(i, j int) bool { return v.recs[i].off < v.recs[j].off })
	return v
}

// read returns bytes [off, off+n) as replay would leave them. The caller
// has checked the range. The result must not be modified; it aliases the
// medium when no record touches the range.
func (v *view) read(off format.Off, n int) []byte {
	s := v.b[off : off+format.Off(n)]
	if len(v.recs) == 0 {
		return s
	}
	lo, hi := uint64(off), uint64(off)+uint64(n)
	i := sort.Search(len(v.recs), func(i int) bool { return uint64(v.recs[i].off) >= hi })
	var hit []orec
	for j := i - 1; j >= 0 && uint64(v.recs[j].off)+v.maxLen > lo; j-- {
		r := v.recs[j]
		if uint64(r.off)+uint64(len(r.data)) > lo {
			hit = append(hit, r)
		}
	}
	if len(hit) == 0 {
		return s
	}
	sort.Slice(hit, func(i, j int) bool { return hit[i].seq < hit[j].seq })
	out := append([]byte(nil), s...)
	for _, r := range hit {
		a, b := max(lo, uint64(r.off)), min(hi, uint64(r.off)+uint64(len(r.data)))
		copy(out[a-lo:b-lo], r.data[a-uint64(r.off):b-uint64(r.off)])
	}
	return out
}

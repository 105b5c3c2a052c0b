package embedding

import (
	"encoding/binary"
	"syscall"

	"go.uber.org/zap"

	"github.com/dnnfs/dnnfs/embedding/wire"
)

var le = binary.LittleEndian

// ParseLookup decodes a request file's request (package wire's format)
// and checks it against the table's rows and dtype.
func (t *Table) ParseLookup(b []byte) (*wire.Request, error) {
	return wire.DecodeRequest(b, t.hdr.Rows, wire.Dtype(t.hdr.Dtype))
}

// Lookup runs a request asynchronously: the rows it names are read once
// each (deduplicated, sector-aligned runs per shard copy) through the
// scheduler, then gathered or pooled; done receives the encoded result.
func (t *Table) Lookup(r *wire.Request, done func(result []byte)) {
	rb := int(t.rowBytes)
	uniq, at := dedup(r.Indices, t.hdr.Rows)
	rowBuf := getReadBuf(len(uniq) * rb) // recycled once the compute request has run
	rowData := rowBuf.b
	var pieces []*piece
	var pins []*location
	maxPiece := int64(t.tier.sched.cfg.MaxPiece)
	for i := 0; i < len(uniq); {
		s := int(uint64(uniq[i]) / t.hdr.ShardRows)
		first := int64(uint64(s) * t.hdr.ShardRows)
		j := i
		for j < len(uniq) && uniq[j] < first+int64(t.hdr.ShardRows) {
			j++
		}
		l := t.pin(s)
		pins = append(pins, l)
		t.shards[s].heat.Add(uint64((j - i) * rb))
		d, devBase := t.readCopy(l)
		// Coalesce rows into runs of adjacent sectors up to MaxPiece; the
		// runs' buffers are carved from one aligned allocation below.
		for k := i; k < j; {
			sec := d.sector
			runA := (devBase + (uniq[k]-first)*int64(rb)) / sec * sec
			runB := runA
			m := k
			for m < j {
				ra := devBase + (uniq[m]-first)*int64(rb)
				a := ra / sec * sec
				b := (ra + int64(rb) + sec - 1) / sec * sec
				if m > k && (a > runB || b-runA > maxPiece) {
					break
				}
				runB = max(runB, b)
				m++
			}
			lo, hi := k, m
			ra0 := runA
			p := &piece{dev: d, off: runA, size: int(runB - runA)}
			p.after = func() {
				buf := p.buf
				for u := lo; u < hi; u++ {
					src := devBase + (uniq[u]-first)*int64(rb) - ra0
					copy(rowData[u*rb:(u+1)*rb], buf[src:src+int64(rb)])
				}
			}
			pieces = append(pieces, p)
			k = m
		}
		i = j
	}
	readBuf := carve(pieces)
	t.tier.useful.Add(uint64(len(r.Indices) * rb))
	t.tier.startAsync(len(r.Indices), len(r.Indices)*rb, pieces, func(err error) {
		readBuf.put() // every piece is done; the rows are in rowData
		for _, l := range pins {
			l.refs.Add(-1)
		}
		if err != nil {
			rowBuf.put()
			t.tier.log.Error("embedding lookup failed", zap.Uint64("table_ino", uint64(t.in.Ino)), zap.Uint64("tag", r.Tag), zap.Error(err))
			done(wire.EncodeResult(r.Tag, syscall.EIO, 0, 0, nil))
			return
		}
		// The loader only read: the gather or pooling is a compute
		// request for the processing elements (DESIGN.md §Compute stage).
		t.tier.compute.submit(&computeRequest{tag: r.Tag, ops: opsFor(r, t.hdr.Dtype), req: r, dtype: t.hdr.Dtype,
			dim: int(t.hdr.Dim), rb: rb, uniq: uniq, at: at, rows: rowData, release: rowBuf.put, done: done})
	})
}

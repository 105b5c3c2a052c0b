package format

import (
	"fmt"
)

// TxRecord is one record of a journal transaction: Data is stored at pool
// byte offset Off when the transaction is applied.
type TxRecord struct {
	Off  Off
	Data []byte
}

// RecordSize is the bytes a record of n data bytes takes in the
// transaction area (header plus data padded to 8 bytes).
func RecordSize(n int) int { return RecHeader + (n+7)&^7 }

// TxSize is the bytes recs take after the transaction header.
func TxSize(recs []TxRecord) int {
	n := 0
	for _, r := range recs {
		n += RecordSize(len(r.Data))
	}
	return n
}

// EncodeTx writes transaction seq with recs into area (the transaction
// area, FORMAT.md "Journal": header, then records) and returns the bytes
// used. area must hold TxHeader+TxSize(recs) bytes.
func EncodeTx(area []byte, seq uint64, recs []TxRecord) int {
	size := TxSize(recs)
	area = area[:TxHeader+size]
	body := area[TxHeader:]
	p := 0
	for _, r := range recs {
		le.PutUint64(body[p+RecOff:], uint64(r.Off))
		le.PutUint32(body[p+RecLen:], uint32(len(r.Data)))
		le.PutUint32(body[p+RecLen+4:], 0)
		p += RecHeader
		n := copy(body[p:], r.Data)
		clear(body[p+n : p+(n+7)&^7])
		p += (n + 7) &^ 7
	}
	le.PutUint64(area[TxSeq:], seq)
	le.PutUint32(area[TxCount:], uint32(len(recs)))
	le.PutUint32(area[TxLen:], uint32(size))
	le.PutUint32(area[TxCRC:], txChecksum(area[:TxCRC], body))
	le.PutUint32(area[TxCRC+4:], 0)
	return len(area)
}

// txChecksum is the CRC-32C over the header's first 16 bytes and the
// record bytes.
func txChecksum(head, body []byte) uint32 {
	return Checksum(append(append(make([]byte, 0, len(head)+len(body)), head...), body...))
}

// DecodeTx parses and validates the transaction in area (the transaction
// area of the journal region) that the commit word names as seq. Every
// record must target [minOff, poolSize): beyond the journal region and
// inside the pool. The records alias area. Errors wrap ErrBadTx; their
// text says what is wrong in words a checker shows as is.
func DecodeTx(area []byte, seq uint64, minOff, poolSize uint64) ([]TxRecord, error) {
	bad := func(f string, args ...any) ([]TxRecord, error) {
		return nil, &txError{fmt.Sprintf(f, args...)}
	}
	if len(area) < TxHeader {
		return bad("the transaction area is %d bytes", len(area))
	}
	if got := le.Uint64(area[TxSeq:]); got != seq {
		return bad("the transaction area holds transaction %d", got)
	}
	count := le.Uint32(area[TxCount:])
	n := uint64(le.Uint32(area[TxLen:]))
	if n > uint64(len(area)-TxHeader) {
		return bad("it claims %d bytes of records", n)
	}
	body := area[TxHeader : TxHeader+n]
	if got, want := le.Uint32(area[TxCRC:]), txChecksum(area[:TxCRC], body); got != want {
		return bad("checksum stored %08x, computed %08x", got, want)
	}
	recs := make([]TxRecord, 0, min(count, uint32(n/RecHeader)))
	p := uint64(0)
	for i := uint32(0); i < count; i++ {
		if p+RecHeader > n {
			return bad("record %d lies past the end", i)
		}
		off := le.Uint64(body[p+RecOff:])
		l := uint64(le.Uint32(body[p+RecLen:]))
		p += RecHeader
		if l > n-p || off > poolSize || l > poolSize-off || off < minOff {
			return bad("record %d (offset %d, %d bytes) is out of range", i, off, l)
		}
		recs = append(recs, TxRecord{Off: Off(off), Data: body[p : p+l]})
		p += (l + 7) &^ 7
	}
	return recs, nil
}

// txError is a damaged transaction; it wraps ErrBadTx.
type txError struct{ why string }

func (e *txError) Error() string { return e.why }
func (e *txError) Unwrap() error { return ErrBadTx }

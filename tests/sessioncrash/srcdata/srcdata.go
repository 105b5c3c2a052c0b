// Package srcdata is the deterministic source the session crash tests
// write and compare against: byte i of source seed is a function of
// (seed, i) only, so a writer process and the test agree on every byte
// without sharing anything but the seed.
package srcdata

import (
	"bytes"
	"encoding/binary"
)

// word is splitmix64 of (seed, index of the 8-byte word).
func word(seed, w uint64) uint64 {
	z := seed*0x9e3779b97f4a7c15 + w + 0x632be59bd9b4e019
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// Byte returns byte off of source seed.
func Byte(seed uint64, off int64) byte {
	return byte(word(seed, uint64(off)/8) >> (8 * (uint64(off) % 8)))
}

// Fill stores bytes [off, off+len(p)) of source seed into p.
func Fill(seed uint64, off int64, p []byte) {
	i := 0
	for i < len(p) && (off+int64(i))%8 != 0 { // unaligned head
		p[i] = Byte(seed, off+int64(i))
		i++
	}
	for ; i+8 <= len(p); i += 8 {
		binary.LittleEndian.PutUint64(p[i:], word(seed, uint64(off+int64(i))/8))
	}
	for ; i < len(p); i++ {
		p[i] = Byte(seed, off+int64(i))
	}
}

// Bytes returns bytes [off, off+n) of source seed.
func Bytes(seed uint64, off int64, n int) []byte {
	p := make([]byte, n)
	Fill(seed, off, p)
	return p
}

// FirstDiff returns the offset (relative to off) of the first byte of p
// that differs from source seed at off, or -1.
func FirstDiff(seed uint64, off int64, p []byte) int {
	buf := make([]byte, 64<<10)
	for i := 0; i < len(p); i += len(buf) {
		n := min(len(buf), len(p)-i)
		Fill(seed, off+int64(i), buf[:n])
		if bytes.Equal(p[i:i+n], buf[:n]) {
			continue
		}
		for j := 0; j < n; j++ {
			if p[i+j] != buf[j] {
				return i + j
			}
		}
	}
	return -1
}

package format

import "fmt"

// DTOf returns the dirent type for an inode mode.
func DTOf(mode uint32) uint8 {
	switch mode & ModeType {
	case ModeDir:
		return DTDir
	case ModeLnk:
		return DTLnk
	case ModeFifo:
		return DTFifo
	case ModeChr:
		return DTChr
	case ModeBlk:
		return DTBlk
	case ModeSock:
		return DTSock
	}
	return DTReg
}

// ModeOfDT is the file type bits of a dirent type (DTOf's inverse).
func ModeOfDT(t uint8) uint32 {
	switch t {
	case DTDir:
		return ModeDir
	case DTLnk:
		return ModeLnk
	case DTFifo:
		return ModeFifo
	case DTChr:
		return ModeChr
	case DTBlk:
		return ModeBlk
	case DTSock:
		return ModeSock
	}
	return ModeReg
}

// Dirent is a decoded directory entry.
type Dirent struct {
	Name string
	Type uint8
	Ino  Ino
}

// DirentOff returns the byte offset of slot i inside the directory's data.
func DirentOff(slot uint64) uint64 {
	return slot/DirentsPerBlock*BlockSize + slot%DirentsPerBlock*DirentSize
}

// Encode writes the entry into b (DirentSize bytes).
func (d *Dirent) Encode(b []byte) {
	b = b[:DirentSize]
	clear(b)
	b[DENameLen] = uint8(len(d.Name))
	b[DEType] = d.Type
	le.PutUint64(b[DEIno:], uint64(d.Ino))
	copy(b[DEName:], d.Name)
	le.PutUint32(b[DECRC:], Checksum(b[4:]))
}

// DecodeDirent parses a slot; ok is false for a free slot.
func DecodeDirent(b []byte) (d Dirent, ok bool, err error) {
	if len(b) < DirentSize {
		return d, false, fmt.Errorf("dirent: %w: short buffer", corrupt)
	}
	b = b[:DirentSize]
	if IsZero(b) {
		return d, false, nil
	}
	if got, want := le.Uint32(b[DECRC:]), Checksum(b[4:]); got != want {
		return d, false, fmt.Errorf("dirent: %w (stored %08x, computed %08x)", badChecksum, got, want)
	}
	n := int(b[DENameLen])
	if n == 0 {
		return d, false, fmt.Errorf("dirent: %w: empty name", corrupt)
	}
	d.Name = string(b[DEName : DEName+n])
	d.Type = b[DEType]
	d.Ino = Ino(le.Uint64(b[DEIno:]))
	if d.Ino == 0 {
		return d, false, fmt.Errorf("dirent %q: %w: inode 0", d.Name, corrupt)
	}
	for i := 0; i < len(d.Name); i++ {
		if d.Name[i] == '/' || d.Name[i] == 0 {
			return d, false, fmt.Errorf("dirent: %w: name contains %q", corrupt, d.Name[i])
		}
	}
	if d.Name == "." || d.Name == ".." {
		return d, false, fmt.Errorf("dirent: %w: reserved name %q", corrupt, d.Name)
	}
	return d, true, nil
}

package format

import "fmt"

// DevID names an SSD-tier device: its slot in the registry plus one, so 0
// means "none".
type DevID uint16

// TierDevice is one registered SSD-tier device.
type TierDevice struct {
	UUID [16]byte
	Path string
}

// EncodeTier writes the registry block.
func EncodeTier(b []byte, devs []TierDevice) {
	b = b[:BlockSize]
	clear(b)
	le.PutUint32(b[TRCount:], uint32(len(devs)))
	le.PutUint64(b[TRMagic:], TierMagic)
	for i, d := range devs {
		e := b[TREntries+i*TierDevSize:]
		copy(e[TDUUID:TDUUID+16], d.UUID[:])
		p := d.Path
		if len(p) > MaxTierPath {
			p = p[len(p)-MaxTierPath:]
		}
		le.PutUint16(e[TDPathLen:], uint16(len(p)))
		copy(e[TDPath:], p)
	}
	le.PutUint32(b[TRCRC:], Checksum(b[4:]))
}

// DecodeTier parses the registry block.
func DecodeTier(b []byte) ([]TierDevice, error) {
	if len(b) < BlockSize {
		return nil, fmt.Errorf("tier registry: %w: short buffer", corrupt)
	}
	b = b[:BlockSize]
	if got, want := le.Uint32(b[TRCRC:]), Checksum(b[4:]); got != want {
		return nil, fmt.Errorf("tier registry: %w (stored %08x, computed %08x)", badChecksum, got, want)
	}
	if le.Uint64(b[TRMagic:]) != TierMagic {
		return nil, fmt.Errorf("tier registry: %w: bad magic", corrupt)
	}
	n := le.Uint32(b[TRCount:])
	if n > MaxTierDevices {
		return nil, fmt.Errorf("tier registry: %w: %d devices", corrupt, n)
	}
	devs := make([]TierDevice, n)
	for i := range devs {
		e := b[TREntries+i*TierDevSize:]
		copy(devs[i].UUID[:], e[TDUUID:TDUUID+16])
		pl := int(le.Uint16(e[TDPathLen:]))
		if pl > MaxTierPath || devs[i].UUID == [16]byte{} {
			return nil, fmt.Errorf("tier registry: %w: device %d entry", corrupt, i+1)
		}
		devs[i].Path = string(e[TDPath : TDPath+pl])
	}
	return devs, nil
}

// DevLabel is a decoded device label.
type DevLabel struct {
	Dev  DevID
	Pool [16]byte
	UUID [16]byte
}

// Encode writes the label (DevLabelSize bytes).
func (l *DevLabel) Encode(b []byte) {
	b = b[:DevLabelSize]
	clear(b)
	le.PutUint64(b[DLMagic:], DevMagic)
	le.PutUint32(b[DLVersion:], Version)
	le.PutUint32(b[DLDev:], uint32(l.Dev))
	copy(b[DLPool:DLPool+16], l.Pool[:])
	copy(b[DLUUID:DLUUID+16], l.UUID[:])
	le.PutUint32(b[DLCRC:], Checksum(b[:DLCRC]))
}

// DecodeDevLabel parses a device label.
func DecodeDevLabel(b []byte) (DevLabel, error) {
	var l DevLabel
	if len(b) < DevLabelSize {
		return l, fmt.Errorf("device label: %w: short buffer", corrupt)
	}
	if le.Uint64(b[DLMagic:]) != DevMagic {
		return l, fmt.Errorf("device label: %w", badMagic)
	}
	if got, want := le.Uint32(b[DLCRC:]), Checksum(b[:DLCRC]); got != want {
		return l, fmt.Errorf("device label: %w (stored %08x, computed %08x)", badChecksum, got, want)
	}
	if v := le.Uint32(b[DLVersion:]); v != Version {
		return l, fmt.Errorf("device label: %w %d", badVersion, v)
	}
	d := le.Uint32(b[DLDev:])
	if d < 1 || d > MaxTierDevices {
		return l, fmt.Errorf("device label: %w: device id %d", corrupt, d)
	}
	l.Dev = DevID(d)
	copy(l.Pool[:], b[DLPool:DLPool+16])
	copy(l.UUID[:], b[DLUUID:DLUUID+16])
	return l, nil
}

package units

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// suffixes are tried in order: every longer suffix before its own tail
// ("KiB" and "KB" before "B").
var suffixes = []struct {
	s    string
	mult int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"PiB", 1 << 50},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"PB", 1e15},
	{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"T", 1 << 40}, {"P", 1 << 50}, {"B", 1},
}

// ParseSize reads a positive size with an optional unit suffix: binary
// (KiB..PiB, and K..P as their short forms) or decimal (KB..PB).
func ParseSize(s string) (int64, error) {
	num, mult := strings.TrimSpace(s), int64(1)
	for _, u := range suffixes {
		if strings.HasSuffix(strings.ToUpper(num), strings.ToUpper(u.s)) {
			num, mult = strings.TrimSpace(num[:len(num)-len(u.s)]), u.mult
			break
		}
	}
	n, err := strconv.ParseUint(num, 10, 64)
	if errors.Is(err, strconv.ErrRange) || (err == nil && n > uint64(math.MaxInt64/mult)) {
		return 0, fmt.Errorf("size %q: %w", s, ErrTooLarge)
	}
	if err == nil && n == 0 {
		return 0, fmt.Errorf("size %q: %w", s, ErrZero)
	}
	if err != nil {
		return 0, fmt.Errorf("cannot parse size %q (examples: 8GiB, 512MiB, 2TiB, 1PiB, 1073741824)", s)
	}
	return int64(n) * mult, nil
}

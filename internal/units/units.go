package units

import (
	"fmt"
	"strconv"
	"strings"
)

var suffixes = []struct {
	s    string
	mult int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1000}, {"MB", 1000 * 1000}, {"GB", 1000 * 1000 * 1000}, {"TB", 1000 * 1000 * 1000 * 1000},
	{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"T", 1 << 40}, {"B", 1},
}

// ParseSize reads a positive size with an optional unit suffix.
func ParseSize(s string) (int64, error) {
	num, mult := strings.TrimSpace(s), int64(1)
	for _, u := range suffixes {
		if strings.HasSuffix(strings.ToUpper(num), strings.ToUpper(u.s)) {
			num, mult = strings.TrimSpace(num[:len(num)-len(u.s)]), u.mult
			break
		}
	}
	n, err := strconv.ParseUint(num, 10, 63)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("cannot parse size %q (examples: 8GiB, 512MiB, 1073741824)", s)
	}
	if int64(n) > (1<<62)/mult {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return int64(n) * mult, nil
}

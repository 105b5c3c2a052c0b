package crash_test

import "testing"

func TestOnlyOrphans(t *testing.T) {
	for _, tc := range []struct {
		out  string
		want bool
	}{
		{"inode 12 (byte 1234): orphan: link count 0 and no directory entry names it (unlinked while open); Repair frees it\n1 problem\n", true},
		{"inode 12 (byte 1234): orphan: link count 0\ninode 13 (byte 1490): link count 2, but 1 directory entries name it (want 1); Repair sets it\n", false},
		{"directory 1: entry \"x\" names free inode 9\n", false},
		{"journal (block 2): journal damaged\n", false},
		{"pool: 40 inodes, 3 directories\ninode 7: orphan: link count 0\n", true},
		{"clean\n", false},
	} {
		if got := onlyOrphans(tc.out); got != tc.want {
			t.Errorf("onlyOrphans(%q) = %v, want %v", tc.out, got, tc.want)
		}
	}
}

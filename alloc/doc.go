// Package alloc is the free-block map of a pool's data region: one bit a
// block, with the placement policy (goal, next-fit runs, contiguous runs)
// that the mounted file system and the checker's repairs both use.
//
// The map is never stored on media: package recovery rebuilds it at every
// mount (and for every check) from the blocks the live inodes own, so a
// crash cannot leave it inconsistent. It must not import anything above
// package format.
//
// What it owns: the bitmap and the placement policy of pool blocks. What
// it must not do: store anything on media, or know what a block is for.
package alloc

//go:build !amd64

package pmem

import (
	"sync/atomic"
	"unsafe"
)

// cpuFlush: no user-space cache write-back here, so DAX media fall back to
// msync (which the kernel implements for fsdax files by flushing caches).
const cpuFlush = false

// FlushInstruction names the cache-flush instruction DAX media use, for logs.
func FlushInstruction() string { return "none" }

func flushCPU(p unsafe.Pointer, n uintptr) {}

var fenceWord atomic.Uint32

// sfence is a full barrier for the Go memory model; no store ordering to
// media is implied without a flush instruction.
func sfence() { fenceWord.Add(1) }

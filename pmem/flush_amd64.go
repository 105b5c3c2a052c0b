package pmem

import "unsafe"

// Implemented in flush_amd64.s.

func cpuid(eax, ecx uint32) (a, b, c, d uint32)

//go:noescape
func flushCLWB(addr unsafe.Pointer, n uintptr)

//go:noescape
func flushCLFLUSHOPT(addr unsafe.Pointer, n uintptr)

//go:noescape
func flushCLFLUSH(addr unsafe.Pointer, n uintptr)

func sfence()

// cpuFlush: this architecture can write back cache lines from user space,
// so DAX media are flushed by instruction rather than by msync.
const cpuFlush = true

const (
	insnCLFLUSH = iota
	insnCLFLUSHOPT
	insnCLWB
)

// flushInsn is picked once: CPUID cannot change under a running process.
var flushInsn = detectFlush()

func detectFlush() int {
	maxLeaf, _, _, _ := cpuid(0, 0)
	if maxLeaf >= 7 {
		_, ebx, _, _ := cpuid(7, 0)
		switch {
		case ebx&(1<<24) != 0:
			return insnCLWB // writes back and keeps the line cached
		case ebx&(1<<23) != 0:
			return insnCLFLUSHOPT // evicts, but flushes to different lines run in parallel
		}
	}
	return insnCLFLUSH // every x86-64 has it; serialises on each line
}

// FlushInstruction names the cache-flush instruction DAX media use, for logs.
func FlushInstruction() string {
	switch flushInsn {
	case insnCLWB:
		return "clwb"
	case insnCLFLUSHOPT:
		return "clflushopt"
	}
	return "clflush"
}

// flushCPU writes back the cache lines overlapping [p, p+n). It is not
// ordered against later stores: follow it with sfence.
func flushCPU(p unsafe.Pointer, n uintptr) {
	switch flushInsn {
	case insnCLWB:
		flushCLWB(p, n)
	case insnCLFLUSHOPT:
		flushCLFLUSHOPT(p, n)
	default:
		flushCLFLUSH(p, n)
	}
}

package pmem

import (
	"testing"
	"unsafe"
)

// Each instruction the CPU has, not only the one detectFlush picked.
func TestFlushInstructions(t *testing.T) {
	_, ebx, _, _ := cpuid(7, 0)
	insns := map[string]func(unsafe.Pointer, uintptr){"clflush": flushCLFLUSH}
	if ebx&(1<<23) != 0 {
		insns["clflushopt"] = flushCLFLUSHOPT
	}
	if ebx&(1<<24) != 0 {
		insns["clwb"] = flushCLWB
	}
	if _, ok := insns[FlushInstruction()]; !ok {
		t.Fatalf("FlushInstruction() = %q, not among %v", FlushInstruction(), insns)
	}
	buf := make([]byte, 2*4096+3)
	for name, flush := range insns {
		for _, r := range [][2]int{{0, len(buf)}, {1, 1}, {63, 2}, {100, 0}, {len(buf) - 1, 1}} {
			buf[r[0]] = byte(r[1])
			flush(unsafe.Pointer(&buf[r[0]]), uintptr(r[1]))
			sfence()
			if buf[r[0]] != byte(r[1]) {
				t.Fatalf("%s changed memory", name)
			}
		}
	}
}

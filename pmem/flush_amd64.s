#include "textflag.h"

// func cpuid(eax, ecx uint32) (a, b, c, d uint32)
TEXT ·cpuid(SB), NOSPLIT, $0-24
	MOVL eax+0(FP), AX
	MOVL ecx+4(FP), CX
	CPUID
	MOVL AX, a+8(FP)
	MOVL BX, b+12(FP)
	MOVL CX, c+16(FP)
	MOVL DX, d+20(FP)
	RET

// Each flush routine writes back every 64-byte line that overlaps
// [addr, addr+n). n == 0 flushes nothing.

// func flushCLWB(addr unsafe.Pointer, n uintptr)
TEXT ·flushCLWB(SB), NOSPLIT, $0-16
	MOVQ addr+0(FP), AX
	MOVQ n+8(FP), BX
	TESTQ BX, BX
	JZ clwbdone
	ADDQ AX, BX
	ANDQ $~63, AX
clwbloop:
	CLWB (AX)
	ADDQ $64, AX
	CMPQ AX, BX
	JCS clwbloop
clwbdone:
	RET

// func flushCLFLUSHOPT(addr unsafe.Pointer, n uintptr)
TEXT ·flushCLFLUSHOPT(SB), NOSPLIT, $0-16
	MOVQ addr+0(FP), AX
	MOVQ n+8(FP), BX
	TESTQ BX, BX
	JZ optdone
	ADDQ AX, BX
	ANDQ $~63, AX
optloop:
	CLFLUSHOPT (AX)
	ADDQ $64, AX
	CMPQ AX, BX
	JCS optloop
optdone:
	RET

// func flushCLFLUSH(addr unsafe.Pointer, n uintptr)
TEXT ·flushCLFLUSH(SB), NOSPLIT, $0-16
	MOVQ addr+0(FP), AX
	MOVQ n+8(FP), BX
	TESTQ BX, BX
	JZ clfdone
	ADDQ AX, BX
	ANDQ $~63, AX
clfloop:
	CLFLUSH (AX)
	ADDQ $64, AX
	CMPQ AX, BX
	JCS clfloop
clfdone:
	RET

// func sfence()
TEXT ·sfence(SB), NOSPLIT, $0-0
	SFENCE
	RET

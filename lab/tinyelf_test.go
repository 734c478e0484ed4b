package lab

import (
	"bytes"
	bin "encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/novox/mesh-host/wire/archive"
)

// tinyRelease returns a static Linux amd64 executable of about 160 bytes that prints version
// and a newline and exits 0, whatever its arguments: it passes a host's delivery (an ELF
// executable for this machine whose preflight's first line is the version), so a rollout across
// a thousand hosts moves a few hundred bytes per node instead of a real host's megabytes. A
// shell script would not do: delivery and `mesh-release build` both want an ELF executable.
// ok is false on other architectures.
func tinyRelease(version string) (exe []byte, ok bool) {
	if runtime.GOARCH != "amd64" {
		return nil, false
	}
	msg := []byte(version + "\n")
	const base, hdr = 0x400000, 64 + 56 // one ELF header and one program header, then code
	code := []byte{
		0xb8, 1, 0, 0, 0, // mov eax, 1 (write)
		0xbf, 1, 0, 0, 0, // mov edi, 1 (stdout)
		0x48, 0x8d, 0x35, 0, 0, 0, 0, // lea rsi, [rip+msg]
		0xba, 0, 0, 0, 0, // mov edx, len(msg)
		0x0f, 0x05, // syscall
		0xb8, 60, 0, 0, 0, // mov eax, 60 (exit)
		0x31, 0xff, // xor edi, edi
		0x0f, 0x05, // syscall
	}
	bin.LittleEndian.PutUint32(code[13:], uint32(len(code)-17)) // from the end of the lea to msg
	bin.LittleEndian.PutUint32(code[18:], uint32(len(msg)))
	size := uint64(hdr + len(code) + len(msg))

	var b bytes.Buffer
	le := bin.LittleEndian
	b.Write([]byte{0x7f, 'E', 'L', 'F', 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0}) // 64-bit, little-endian, SysV
	bin.Write(&b, le, uint16(2))                                             // ET_EXEC
	bin.Write(&b, le, uint16(62))                                            // EM_X86_64
	bin.Write(&b, le, uint32(1))                                             // EV_CURRENT
	bin.Write(&b, le, uint64(base+hdr))                                      // entry
	bin.Write(&b, le, uint64(64))                                            // program headers at
	bin.Write(&b, le, uint64(0))                                             // no section headers
	bin.Write(&b, le, uint32(0))                                             // flags
	bin.Write(&b, le, []uint16{64, 56, 1, 64, 0, 0})                         // ehsize, phentsize, phnum, shentsize, shnum, shstrndx
	bin.Write(&b, le, []uint32{1, 5})                                        // PT_LOAD, R+X
	bin.Write(&b, le, []uint64{0, base, base, size, size, 0x1000})           // offset, vaddr, paddr, filesz, memsz, align
	b.Write(code)
	b.Write(msg)
	return b.Bytes(), true
}

func TestTinyReleasePassesForAHostBinary(t *testing.T) {
	exe, ok := tinyRelease("v1.1.0")
	if !ok {
		t.Skip("the tiny release is amd64 machine code")
	}
	path := filepath.Join(t.TempDir(), "mesh-host")
	if err := os.WriteFile(path, exe, 0o755); err != nil {
		t.Fatal(err)
	}
	if arch, err := archive.ArchOf(path); err != nil || arch != "amd64" {
		t.Fatalf("ArchOf = %q, %v; want amd64", arch, err)
	}
	out, err := exec.Command(path, "preflight", "--config", "x").Output()
	if err != nil || string(out) != "v1.1.0\n" {
		t.Fatalf("preflight said %q, %v; want \"v1.1.0\\n\"", out, err)
	}
}

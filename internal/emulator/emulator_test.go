package emulator

import (
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"runtime"
	"strings"
	"testing"
)

func TestEachProbeIsAnExecutableForItsArchitecture(t *testing.T) {
	for _, tc := range []struct {
		arch    string
		class   elf.Class
		machine elf.Machine
	}{
		{"amd64", elf.ELFCLASS64, elf.EM_X86_64},
		{"arm64", elf.ELFCLASS64, elf.EM_AARCH64},
		{"arm", elf.ELFCLASS32, elf.EM_ARM},
	} {
		t.Run(tc.arch, func(t *testing.T) {
			exe, err := Probe(tc.arch)
			if err != nil {
				t.Fatal(err)
			}
			f, err := elf.NewFile(bytes.NewReader(exe))
			if err != nil {
				t.Fatal(err)
			}
			if f.Class != tc.class || f.Machine != tc.machine || f.Type != elf.ET_EXEC || len(f.Progs) != 1 || f.Entry != f.Progs[0].Vaddr+entryOffset(f) {
				t.Errorf("class %v machine %v type %v, %d program headers, entry %#x", f.Class, f.Machine, f.Type, len(f.Progs), f.Entry)
			}
			if f.Progs[0].Filesz != uint64(len(exe)) {
				t.Errorf("the segment holds %d bytes of a %d-byte file", f.Progs[0].Filesz, len(exe))
			}
		})
	}
}

// entryOffset is where the code starts after the headers.
func entryOffset(f *elf.File) uint64 {
	if f.Class == elf.ELFCLASS32 {
		return 52 + 32
	}
	return 64 + 56
}

func TestThisMachineRunsItsOwnArchitecture(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the probes are Linux programs")
	}
	if err := Runs(context.Background(), runtime.GOARCH); err != nil {
		t.Fatal(err)
	}
}

// A program that ran but did not exit 42, or that the kernel would not execute, is not taken for
// a working emulator; either way the error says what to install.
func TestAProbeThatDidNotRunAsBuiltIsACannotRun(t *testing.T) {
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		t.Skip("hand-made amd64 programs")
	}
	for _, tc := range []struct {
		name string
		exe  []byte
		want string
	}{
		{"exits 0", elf64(62, []byte{0x31, 0xff, 0xb8, 60, 0, 0, 0, 0x0f, 0x05}), "exited 0, not 42"},
		{"not an executable", []byte("\x7fELF garbage"), "exec format error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := run(context.Background(), "amd64", tc.exe)
			if !errors.Is(err, ErrCannotRun) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "qemu-user-static and binfmt-support") {
				t.Fatalf("run = %v; want ErrCannotRun saying %q and what to install", err, tc.want)
			}
		})
	}
}

func TestAnArchitectureWithoutAProbeIsNamed(t *testing.T) {
	_, err := Probe("riscv64")
	if err == nil || !strings.Contains(err.Error(), "linux/riscv64") {
		t.Fatalf("Probe(riscv64) = %v; want an error naming linux/riscv64", err)
	}
}

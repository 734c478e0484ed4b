// Package emulator tells whether this machine runs another architecture's Linux binaries (qemu-user).
//
// Debian's qemu-user-static registers its emulators with the kernel's binfmt_misc, which then
// runs an arm64 or arm binary on an amd64 machine as if it were native: exec works, and the
// program sees the architecture it was built for (uname -m says aarch64). Whether that works
// here is a fact of the machine (the packages installed, binfmt_misc mounted, the entries
// enabled), so Runs does not read the configuration: it runs a tiny program built for the
// architecture and checks that it ran.
package emulator

import (
	"bytes"
	"context"
	bin "encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"time"
)

// Install is what makes a Debian or Ubuntu machine run other architectures' binaries, for the
// words of an error or a skip.
const Install = "install Debian's qemu-user-static and binfmt-support (apt-get install qemu-user-static binfmt-support) and mount binfmt_misc (mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc; update-binfmts --enable)"

// ErrCannotRun is wrapped by Runs' error when the machine did not run the probe.
var ErrCannotRun = errors.New("this machine cannot run them")

// probeExit is the status the probe exits with: a program that ran and said so, not one that
// failed some other way with a status of its own.
const probeExit = 42

// Arches are the architectures Runs can probe (GOARCH names).
var Arches = []string{"amd64", "arm64", "arm"}

// Runs reports, as nil, that this machine runs Linux binaries built for goarch (a GOARCH name):
// natively, or through an emulator binfmt_misc hands them to. Otherwise its error says why and
// what to install; it wraps ErrCannotRun when the probe did not run.
func Runs(ctx context.Context, goarch string) error {
	if runtime.GOOS != "linux" {
		return fmt.Errorf("linux/%s binaries: %w (it runs %s, not Linux)", goarch, ErrCannotRun, runtime.GOOS)
	}
	if goarch == runtime.GOARCH {
		return nil
	}
	exe, err := Probe(goarch)
	if err != nil {
		return err
	}
	return run(ctx, goarch, exe)
}

// run writes exe to a temporary file, runs it and says whether it exited probeExit.
func run(ctx context.Context, goarch string, exe []byte) error {
	dir, err := os.MkdirTemp("", "mesh-emulator-probe-")
	if err != nil {
		return fmt.Errorf("write the linux/%s probe: %w", goarch, err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "probe-"+goarch)
	if err := os.WriteFile(path, exe, 0o755); err != nil {
		return fmt.Errorf("write the linux/%s probe: %w", goarch, err)
	}
	var out bytes.Buffer
	for try := 0; ; try++ {
		cmd := exec.CommandContext(ctx, path)
		out.Reset()
		cmd.Stdout, cmd.Stderr = &out, &out
		err = cmd.Run()
		// A fork elsewhere in this process may still hold the file open for writing for an
		// instant (ETXTBSY): that is this process, not the machine, so try again.
		if !errors.Is(err, syscall.ETXTBSY) || try == 20 {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit) && exit.ExitCode() == probeExit:
		return nil
	case err == nil || errors.As(err, &exit):
		return fmt.Errorf("linux/%s binaries: %w: a %d-byte linux/%s program exited %d, not %d (%q); %s",
			goarch, ErrCannotRun, len(exe), goarch, cmdCode(err), probeExit, bytes.TrimSpace(out.Bytes()), Install)
	case ctx.Err() != nil:
		return ctx.Err()
	default:
		// ENOEXEC ("exec format error"): no binfmt_misc entry took it.
		return fmt.Errorf("linux/%s binaries: %w: %v; %s", goarch, ErrCannotRun, err, Install)
	}
}

func cmdCode(err error) int {
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode()
	}
	return 0
}

// Probe is a static Linux executable for goarch, a few hundred bytes, that exits 42 and does
// nothing else: machine code and one ELF program header, written out by hand so that no
// toolchain for goarch is needed to make it.
func Probe(goarch string) ([]byte, error) {
	switch goarch {
	case "amd64":
		return elf64(62, []byte{
			0xbf, probeExit, 0, 0, 0, // mov edi, 42
			0xb8, 60, 0, 0, 0, // mov eax, 60 (exit)
			0x0f, 0x05, // syscall
		}), nil
	case "arm64":
		return elf64(183, words(
			0xd2800000|probeExit<<5, // movz x0, #42
			0xd2800000|93<<5|8,      // movz x8, #93 (exit)
			0xd4000001,              // svc #0
		)), nil
	case "arm":
		return elf32arm(words(
			0xe3a00000|probeExit, // mov r0, #42
			0xe3a07001,           // mov r7, #1 (exit)
			0xef000000,           // svc #0
		)), nil
	}
	return nil, fmt.Errorf("linux/%s binaries: no probe for that architecture (there are probes for %v)", goarch, Arches)
}

func words(w ...uint32) []byte {
	b := make([]byte, 4*len(w))
	for i, x := range w {
		bin.LittleEndian.PutUint32(b[4*i:], x)
	}
	return b
}

// elf64 is a little-endian ELF64 executable of one loadable segment: its headers, then code.
func elf64(machine uint16, code []byte) []byte {
	const base, hdr = 0x400000, 64 + 56
	size := uint64(hdr + len(code))
	var b bytes.Buffer
	le := bin.LittleEndian
	b.Write([]byte{0x7f, 'E', 'L', 'F', 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0}) // 64-bit, little-endian, SysV
	bin.Write(&b, le, []uint16{2, machine})                                  // ET_EXEC
	bin.Write(&b, le, uint32(1))                                             // EV_CURRENT
	bin.Write(&b, le, []uint64{base + hdr, 64, 0})                           // entry, program headers at, no sections
	bin.Write(&b, le, uint32(0))                                             // flags
	bin.Write(&b, le, []uint16{64, 56, 1, 64, 0, 0})                         // ehsize, phentsize, phnum, shentsize, shnum, shstrndx
	bin.Write(&b, le, []uint32{1, 5})                                        // PT_LOAD, R+X
	bin.Write(&b, le, []uint64{0, base, base, size, size, 0x1000})           // offset, vaddr, paddr, filesz, memsz, align
	b.Write(code)
	return b.Bytes()
}

// elf32arm is a little-endian ELF32 ARM (EABI 5) executable of one loadable segment.
func elf32arm(code []byte) []byte {
	const base, hdr = 0x10000, 52 + 32
	size := uint32(hdr + len(code))
	var b bytes.Buffer
	le := bin.LittleEndian
	b.Write([]byte{0x7f, 'E', 'L', 'F', 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0}) // 32-bit, little-endian, SysV
	bin.Write(&b, le, []uint16{2, 40})                                       // ET_EXEC, EM_ARM
	bin.Write(&b, le, []uint32{1, base + hdr, 52, 0, 0x05000000})            // version, entry, phoff, shoff, flags (EABI 5)
	bin.Write(&b, le, []uint16{52, 32, 1, 40, 0, 0})                         // ehsize, phentsize, phnum, shentsize, shnum, shstrndx
	bin.Write(&b, le, []uint32{1, 0, base, base, size, size, 5, 0x1000})     // PT_LOAD, offset, vaddr, paddr, filesz, memsz, R+X, align
	b.Write(code)
	return b.Bytes()
}

package archive

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
)

// ArchOf reads the architecture (as GOARCH names it) of an ELF executable from its header: the
// release names the platform its binary is really for, and a host refuses a binary for
// another before trying to run it.
func ArchOf(path string) (string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return "", fmt.Errorf("%s is not a Linux (ELF) executable: %w", path, err)
	}
	defer f.Close()
	if f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		return "", fmt.Errorf("%s is an ELF %s, not an executable", path, f.Type)
	}
	le := f.ByteOrder == binary.LittleEndian
	is64 := f.Class == elf.ELFCLASS64
	switch f.Machine {
	case elf.EM_X86_64:
		return "amd64", nil
	case elf.EM_386:
		return "386", nil
	case elf.EM_AARCH64:
		return "arm64", nil
	case elf.EM_ARM:
		return "arm", nil
	case elf.EM_RISCV:
		if is64 {
			return "riscv64", nil
		}
	case elf.EM_S390:
		return "s390x", nil
	case elf.EM_PPC64:
		if le {
			return "ppc64le", nil
		}
		return "ppc64", nil
	case elf.EM_LOONGARCH:
		return "loong64", nil
	case elf.EM_MIPS:
		switch {
		case is64 && le:
			return "mips64le", nil
		case is64:
			return "mips64", nil
		case le:
			return "mipsle", nil
		default:
			return "mips", nil
		}
	}
	return "", fmt.Errorf("%s is for ELF machine %s (%d-bit), which this tool does not map to a Go architecture", path, f.Machine, map[bool]int{true: 64, false: 32}[is64])
}

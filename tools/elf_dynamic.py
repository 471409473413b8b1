"""The dynamic-linking entries of a 64-bit little-endian ELF file, read and rewritten in memory.

tools/build_wheel.py uses it to list the libraries a native file asks for (DT_NEEDED) and to
point its library search path (DT_RUNPATH, or the older DT_RPATH) at $ORIGIN-relative
folders inside the wheel. The new path is written over the old string in place, so it must
not be longer; Bazel's absolute build-machine paths always are longer than an $ORIGIN path.
Standard library only.
"""
import struct

PT_LOAD, PT_DYNAMIC = 1, 2
DT_NULL, DT_NEEDED, DT_STRTAB, DT_RPATH, DT_RUNPATH = 0, 1, 5, 15, 29


def is_elf(data):
    return data[:4] == b"\x7fELF"


class ElfDynamic:
    """The dynamic section of `data` (bytes or bytearray of a whole ELF file)."""

    def __init__(self, data, name="ELF file"):
        if not is_elf(data) or data[4] != 2 or data[5] != 1:
            raise ValueError(f"{name}: not a 64-bit little-endian ELF file")
        self.name = name
        phoff, = struct.unpack_from("<Q", data, 0x20)
        phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
        headers = [struct.unpack_from("<IIQQQQQQ", data, phoff + i * phentsize) for i in range(phnum)]
        self._loads = [(h[3], h[5], h[2]) for h in headers if h[0] == PT_LOAD]  # vaddr, filesz, offset
        dynamic = [h for h in headers if h[0] == PT_DYNAMIC]
        self.entries = []  # (file offset of the entry, tag, value)
        if not dynamic:
            return  # statically linked: no libraries, no search path
        offset, size = dynamic[0][2], dynamic[0][5]
        for at in range(offset, offset + size, 16):
            tag, value = struct.unpack_from("<qQ", data, at)
            if tag == DT_NULL:
                break
            self.entries.append((at, tag, value))
        strtab = [v for _, t, v in self.entries if t == DT_STRTAB]
        self._strtab = self._file_offset(strtab[0]) if strtab else None

    def _file_offset(self, vaddr):
        for start, size, offset in self._loads:
            if start <= vaddr < start + size:
                return vaddr - start + offset
        raise ValueError(f"{self.name}: address {vaddr:#x} lies in no loaded segment")

    def _string_at(self, data, index):
        start = self._strtab + index
        return bytes(data[start:data.index(b"\0", start)]).decode()

    def needed(self, data):
        """The sonames the file asks the loader for, in order."""
        return [self._string_at(data, v) for _, t, v in self.entries if t == DT_NEEDED]

    def runpath(self, data):
        """The DT_RUNPATH (else DT_RPATH) string, or None where the file has neither."""
        for tag in (DT_RUNPATH, DT_RPATH):
            for _, t, v in self.entries:
                if t == tag:
                    return self._string_at(data, v)
        return None

    def set_runpath(self, data, path):
        """Overwrite the search path string of `data` (a bytearray) with `path`, NUL-padded."""
        for tag in (DT_RUNPATH, DT_RPATH):
            for _, t, v in self.entries:
                if t == tag:
                    old = self._string_at(data, v)
                    new = path.encode()
                    if len(new) > len(old):
                        raise ValueError(f"{self.name}: search path {path!r} is longer than the "
                                         f"linked one {old!r}")
                    start = self._strtab + v
                    data[start:start + len(old)] = new + b"\0" * (len(old) - len(new))
                    return
        raise ValueError(f"{self.name}: no DT_RUNPATH or DT_RPATH entry to rewrite (link it with an "
                         "-rpath)")

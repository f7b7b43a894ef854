"""Page cache without root: how much of the model's files the page cache holds (mincore through mmap), and
evicting exactly those pages (posix_fadvise DONTNEED)."""

from __future__ import annotations

import ctypes
import mmap
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # every command checks for a post-mortem: keep prometheus_client out of that path
    pass


_PAGE = mmap.PAGESIZE
_WINDOW = 1 << 30  # mincore a file a GiB at a time: the vector stays small (256 KiB)
_LOW_BIT = bytes(b & 1 for b in range(256))


def _libc() -> ctypes.CDLL:
    # the libc this process already has (dlopen(NULL)): find_library("c") would run ldconfig, a process
    lib = ctypes.CDLL(None, use_errno=True)
    lib.mmap.restype = ctypes.c_void_p
    lib.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    lib.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    lib.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    return lib


_libc_handle: ctypes.CDLL | None = None
_MAP_FAILED = ctypes.c_void_p(-1).value


def resident_bytes(path: Path) -> int:
    """Bytes of `path` in the page cache now: mmap (no page is touched) then mincore."""
    global _libc_handle
    if _libc_handle is None:
        _libc_handle = _libc()
    libc = _libc_handle
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        size = os.fstat(fd).st_size
        pages = 0
        for offset in range(0, size, _WINDOW):
            length = min(_WINDOW, size - offset)
            addr = libc.mmap(None, length, mmap.PROT_READ, mmap.MAP_SHARED, fd, offset)
            if addr is None or addr == _MAP_FAILED:
                raise OSError(ctypes.get_errno(), f"mmap {path}: {os.strerror(ctypes.get_errno())}")
            try:
                vec = ctypes.create_string_buffer((length + _PAGE - 1) // _PAGE)
                if libc.mincore(addr, length, vec) != 0:
                    raise OSError(ctypes.get_errno(), f"mincore {path}: {os.strerror(ctypes.get_errno())}")
                pages += vec.raw.translate(_LOW_BIT).count(1)
            finally:
                libc.munmap(addr, length)
        return min(size, pages * _PAGE)
    finally:
        os.close(fd)


def evict_file(path: Path) -> None:
    """Drop the file's clean pages from the page cache (no root needed: any reader may)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def model_folder(model: str) -> Path | None:
    """The local folder holding the model's files: the path given, or its Hugging Face cache snapshot."""
    path = Path(model).expanduser()
    try:
        if path.is_dir():
            return path
        if path.is_file():
            return path.parent
    except OSError:  # a name too long for a path, a loop of links: not a local folder
        pass
    from sparktui.core.modelspec.lookup import hub_dirs, hub_snapshot

    return hub_snapshot(model, hub_dirs())


def model_files(folder: Path) -> list[Path]:
    """Regular files under the folder (HF cache symlinks resolved to their blobs, each once)."""
    seen: dict[Path, None] = {}
    for path in sorted(folder.rglob("*")):
        try:
            real = path.resolve()
            if real.is_file():
                seen.setdefault(real, None)
        except OSError:
            continue
    return list(seen)


@dataclass(frozen=True)
class FileCache:
    path: str
    size: int
    resident_before: int
    resident_after: int
    measured: bool = True  # False: mincore cannot see this file's pages (see `measurable`)


def measurable(path: Path) -> bool:
    """mincore reports a file's real residency only to its owner or a user who may write it;
    to anyone else it says every page is resident (Linux 5.0, against page-cache side channels)."""
    try:
        return path.stat().st_uid == os.geteuid() or os.access(path, os.W_OK)
    except OSError:
        return False


@dataclass
class PageCacheReport:
    folder: str | None
    files: list[FileCache]
    seconds: float
    evicted: bool
    errors: list[str] = field(default_factory=list)

    @property
    def before(self) -> int:
        return sum(f.resident_before for f in self.files if f.measured)

    @property
    def after(self) -> int:
        return sum(f.resident_after for f in self.files if f.measured)

    @property
    def unmeasured(self) -> int:
        return sum(1 for f in self.files if not f.measured)

    @property
    def freed(self) -> int:
        return max(0, self.before - self.after)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(before=self.before, after=self.after, freed=self.freed)
        return d

    def summary(self) -> str:
        if self.folder is None:
            return "page cache: the model is not a local folder; nothing to measure"
        mib = 1 << 20
        blind = (
            f"; {self.unmeasured} file(s) neither yours nor writable: their pages cannot be counted"
            + (" (evicted all the same)" if self.evicted else "")
            if self.unmeasured
            else ""
        )
        if not self.evicted:
            return f"page cache: the model's files hold {self.before / mib:,.0f} MiB{blind}"
        return (
            f"page cache: the model's files held {self.before / mib:,.0f} MiB; evicted "
            f"{self.freed / mib:,.0f} MiB in {self.seconds * 1000:.0f} ms without root "
            f"({self.after / mib:,.0f} MiB left){blind}"
        )


def model_page_cache(model: str, *, evict: bool) -> PageCacheReport:
    """Measure (and with evict=True, evict) the page cache held by the model's own files."""
    started = time.monotonic()
    folder = model_folder(model)
    if folder is None:
        return PageCacheReport(None, [], 0.0, evict)
    files, errors = [], []
    for path in model_files(folder):
        try:
            size = path.stat().st_size
            seen = measurable(path)
            before = resident_bytes(path) if size and seen else 0
            after = before
            if evict and (before or not seen):
                evict_file(path)
                after = resident_bytes(path) if seen else 0
            files.append(FileCache(str(path), size, before, after, seen))
        except OSError as exc:
            errors.append(f"{path}: {exc.strerror or exc}")
    return PageCacheReport(str(folder), files, time.monotonic() - started, evict, errors)

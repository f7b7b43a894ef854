"""Preflight: what a launch refuses (UserError naming the flag and the fix) and warns about before vLLM
starts: the port, the host, utilization on unified memory, an API key off loopback, page cache, the fit's
verdict, and the pool beside the servers already running."""

from __future__ import annotations

import dataclasses
import errno
import re
import socket
from typing import TYPE_CHECKING, Any

from sparktui.core import pool, vllm_log
from sparktui.core.kernel_log import DEFAULT_KERNEL_MODE
from sparktui.core.machine import Machine, host_machine
from sparktui.errors import UserError
from sparktui.runtime.guard import leakgate
from sparktui.runtime.guard.kernel_watch import access as kernel_access
from sparktui.runtime.host.memory import read_memory, read_per_cpu_free
from sparktui.runtime.launch.container_check import container_preflight
from sparktui.runtime.records import state as st
from sparktui.runtime.records.reservations import reservation_of
from sparktui.runtime.watch import model_page_cache

if TYPE_CHECKING:
    from sparktui.core.config import ServeConfig
    from sparktui.core.profiles import Profile


LOOPBACK = ("127.0.0.1", "localhost", "::1")


UNIFIED_MAX_UTILIZATION = 0.90


PAGE_CACHE_WARN_BYTES = 8 << 30


def effective_serve(profile: Profile, extra_args: list[str] | None = None) -> ServeConfig:
    """profile.serve with `vllm serve` flags given on the command line applied on top."""
    from sparktui.core.config import parse_serve_command

    if not extra_args:
        return profile.serve
    merged = parse_serve_command([*profile.serve.to_argv(), *extra_args])
    if merged.api_key is None and profile.serve.api_key is not None:
        merged = merged.replace(api_key=profile.serve.api_key)
    return merged


@dataclasses.dataclass
class Preflight:
    warnings: list[str]
    fit: dict[str, Any] | None = None  # core.fit's verdict, when it could be computed
    notes: list[str] = dataclasses.field(default_factory=list)  # what preflight did (page cache evicted)
    page_cache: dict[str, Any] | None = None  # watch.PageCacheReport.to_dict()
    reservation: pool.Reservation | None = None  # what this server takes of the pool


PER_CPU_NOTE_BYTES = 1 << 30  # per-CPU free pages worth a word at launch


def launch_meminfo() -> dict[str, int]:
    """/proc/meminfo's figures a launch decides on, and the free pages on the kernel's per-CPU lists
    ("PerCpuFree"), which MemAvailable leaves out: right after a server ends they hold up to 1/8 of
    memory (a 4 GiB process killed on the 2-CPU test box: 1.3-1.4 GiB, still 1.2 GiB 10 s later)."""
    sample = read_memory(psi=False)
    return {
        "MemTotal": sample.mem_total,
        "MemAvailable": sample.mem_available,
        "MemFree": sample.mem_free,
        "PerCpuFree": read_per_cpu_free(),
    }


def room(mem: dict[str, int]) -> int | None:
    """What a new server can take: MemAvailable and the per-CPU free pages (None: not known)."""
    available = mem.get("MemAvailable")
    return None if available is None else available + mem.get("PerCpuFree", 0)


def _port_in_use(host: str, port: int) -> bool:
    """Whether something listens on host:port. A host that is not this machine's (EADDRNOTAVAIL)
    or a port it may not take (EACCES) is a UserError of its own: nothing else is listening."""
    # bind first: for an address that is not ours it fails at once, before any probe leaves the box
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host or "0.0.0.0", port))
        except OSError as exc:
            if exc.errno == errno.EADDRNOTAVAIL:
                raise UserError(
                    f"--host {host}: not an address of this machine (EADDRNOTAVAIL), so nothing can listen "
                    "on it; use 127.0.0.1 (this machine only), 0.0.0.0 (every interface) or an address "
                    "`ip -brief address` lists"
                ) from None
            if exc.errno == errno.EACCES:
                raise UserError(
                    f"--port {port}: only root may listen on a port below 1024 (EACCES); choose --port 1024 or above"
                ) from None
            return True
    probe_host = "127.0.0.1" if host in ("0.0.0.0", "", "localhost") else host
    family = socket.AF_INET6 if ":" in probe_host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        if s.connect_ex((probe_host, port)) == 0:
            return True
    return False


_HOST = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252})|[0-9A-Fa-f:.]+(?:%[A-Za-z0-9_.-]+)?")


def check_host(host: str) -> None:
    """--host must be a host name or an IP address (it reaches sockets, never a shell)."""
    if host and not _HOST.fullmatch(host):
        raise UserError(f"--host {host!r}: expected a host name or an IP address such as 127.0.0.1, 0.0.0.0 or ::1")


def is_unified_memory(profile: Profile) -> bool:
    return str(profile.machine) == "dgx-spark"


def preflight(
    profile: Profile,
    serve: ServeConfig | None = None,
    *,
    force: bool = False,
    meminfo: dict[str, int] | None = None,
    evict: bool = False,
) -> Preflight:
    """Refuse what cannot work (UserError naming the flag and the fix); warn about what may not.

    evict=True (the supervisor, right before vLLM starts): evict the page cache the model's own
    files hold (posix_fadvise, no root needed) and say how much it freed."""
    serve = serve if serve is not None else profile.serve
    warnings: list[str] = []
    notes: list[str] = []
    page_cache = None
    watch_settings = getattr(profile, "watch", None)
    if meminfo is None and (watch_settings is None or watch_settings.evict_page_cache):
        report = model_page_cache(serve.model, evict=evict)
        page_cache = report.to_dict()
        if report.folder is not None:
            notes.append(report.summary())
        warnings.extend(f"page cache: {e}" for e in report.errors)
    mem = meminfo if meminfo is not None else launch_meminfo()
    gib = 1 << 30
    if mem.get("PerCpuFree", 0) >= PER_CPU_NOTE_BYTES:
        notes.append(
            f"{mem['PerCpuFree'] / gib:.1f} GiB of free memory sits on the kernel's per-CPU free lists "
            "(just freed, left out of MemAvailable): counted as free here. vLLM's own start-up check reads "
            "MemAvailable (vllm/utils/mem_utils.py), which shows them as the lists drain or vLLM's first "
            "allocations take them"
        )
    check_host(serve.host)
    _, line_notes = profile.guard.guard_lines_with_notes()  # bad lines: UserError, before launching
    warnings.extend(f"guard: {note}" for note in line_notes)
    if (profile.guard.kernel or DEFAULT_KERNEL_MODE) != "off" and (kernel := kernel_access()).source is None:
        warnings.append(f"guard: {kernel.text()}; until then it watches MemAvailable alone")

    for other in st.list_states():
        if other.alive and other.running and other.port == serve.port:
            raise UserError(
                f"--port {serve.port}: sparktui already runs a server there (profile "
                f"{other.profile!r}, supervisor pid {other.supervisor.pid}); stop it with "
                f"`sparktui stop --port {serve.port}` or choose another --port"
            )
    # memory a server that ran here left behind, still held: refused (the fix named) unless forced
    leaks = [(s.port, s.exit.leak) for s in st.list_states() if not s.running and s.exit and s.exit.leak]
    warnings.extend(f"leak gate: {w}" for w in leakgate.gate(leaks, force=force))
    if _port_in_use(serve.host, serve.port):
        raise UserError(
            f"--port {serve.port}: something is already listening on {serve.host}:{serve.port}; "
            "stop it or choose another --port"
        )
    if is_unified_memory(profile) and serve.gpu_memory_utilization > UNIFIED_MAX_UTILIZATION and not force:
        raise UserError(
            f"--gpu-memory-utilization {serve.gpu_memory_utilization}: above {UNIFIED_MAX_UTILIZATION} on "
            "unified memory leaves the CPU side too little and can hang the machine; lower it, or pass "
            "--force if you are sure"
        )
    if serve.host not in LOOPBACK and not serve.api_key:
        exposed = (
            f"--host {serve.host}: the server would be reachable from the network without an API key "
            "(anyone could use /v1)"
        )
        if not force:
            raise UserError(
                f"{exposed}; set api-key in the profile or pass --api-key (it travels as VLLM_API_KEY, "
                "never on the command line), serve on --host 127.0.0.1, or pass --force if you mean it"
            )
        warnings.append(f"{exposed} (--force given)")
    available, free = mem.get("MemAvailable", 0), mem.get("MemFree", 0)
    wanted = serve.gpu_memory_utilization * mem.get("MemTotal", 0)
    # Only when needed: what is left after the model's own pages went, and only when free memory
    # is short of what vLLM will ask for.
    if available - free >= PAGE_CACHE_WARN_BYTES and free < wanted:
        warnings.append(
            f"MemFree is {free / gib:.1f} GiB but MemAvailable is {available / gib:.1f} GiB: page cache "
            "holds the difference (other files' pages: the model's own were evicted without root), and on "
            "a DGX Spark vLLM's start-up free-memory check can fail on it. "
            f"Drop the caches first: {vllm_log.DROP_CACHES}"
        )
    warnings.extend(container_preflight(profile, serve, unified=is_unified_memory(profile)))
    fit_result = _fit_verdict(profile, serve, mem, warnings, force)
    reservation = _pool_reservation(profile, serve, mem, fit_result, warnings, force)
    return Preflight(warnings, fit_result, notes, page_cache, reservation)


def _pool_reservation(
    profile: Profile,
    serve: ServeConfig,
    mem: dict[str, int],
    fit: dict[str, Any] | None,
    warnings: list[str],
    force: bool,
) -> pool.Reservation:
    """What this server will reserve, refused (unless forced) when the servers already running and
    starting leave it too little of the pool: MemAvailable alone misses one that has not allocated yet."""
    machine = host_machine(profile.machine, Machine.from_reading(mem["MemTotal"], room(mem)))
    mine = reservation_for(profile, serve, mem, fit)
    others = [reservation_of(s, machine) for s in st.list_states() if s.alive and s.running and s.port != serve.port]
    beside = pool.BesideOthers(pool.check_pool(machine, mine.bytes, others), mine.basis)
    if not beside.fits:
        why = beside.refusal(serve)
        if not force:
            raise UserError(why)
        warnings.append(f"{why} (--force given)")
    return mine


def _fit_verdict(
    profile: Profile, serve: ServeConfig, mem: dict[str, int], warnings: list[str], force: bool
) -> dict[str, Any] | None:
    from sparktui.core import fit as fit_mod
    from sparktui.core.modelspec import load_serving_spec

    try:
        # a separate drafter (EAGLE, DFlash) adds its own KV layers and weights; nothing is fetched here
        spec = load_serving_spec(serve.model, serve.speculation)
        machine = host_machine(
            profile.machine, Machine.from_reading(mem["MemTotal"], mem.get("MemAvailable")), warnings
        )
        mem_available = mem.get("MemAvailable") if machine.unified else None
        source = ""
        if serve.vllm_version is None:  # fit for the vLLM this runner has (files only: no subprocess)
            from sparktui.runtime.launch.vllm_version import detect

            found = detect(profile, run=False)
            if found.version:
                serve, source = serve.replace(vllm_version=found.version), found.source
        result = fit_mod.fit(
            serve,
            spec,
            machine,
            mem_available=mem_available,
            vllm_version_source=source,
            mem_free=mem.get("MemFree") if machine.unified else None,  # an old vLLM's own figure (cudaMemGetInfo)
            free_lists=mem.get("PerCpuFree", 0) if machine.unified else 0,  # tight, not "won't start"
        )
    except UserError as exc:
        warnings.append(f"fit check skipped: {exc}")
        return None
    verdict = result.to_dict()
    if result.verdict in ("wont_start", "unsafe"):
        reasons = "; ".join(result.reasons) or result.verdict
        if not force:
            raise UserError(
                f"this configuration {result.verdict.replace('_', ' ')}: {reasons} (pass --force to try anyway)"
            )
        warnings.append(f"fit: {result.verdict}: {reasons} (--force given)")
    elif result.verdict == "tight":
        warnings.append("fit: tight: " + "; ".join(result.reasons))
    return verdict


def reservation_for(
    profile: Profile, serve: ServeConfig, mem: dict[str, int], fit: dict[str, Any] | None = None
) -> pool.Reservation:
    """What this server will reserve of the pool (core.pool's rule), as its launch will record it:
    with --kv-cache-memory-bytes, from the fit's budget (worked out here when not given)."""
    machine = host_machine(profile.machine, Machine.from_reading(mem["MemTotal"], room(mem)))
    if fit is None and serve.kv_cache_memory_bytes:
        fit = _fit_verdict(profile, serve, mem, [], force=True)
    budget = (fit or {}).get("budget")
    new, basis = pool.reserved_bytes(machine, serve.gpu_memory_utilization, serve.kv_cache_memory_bytes, budget)
    return pool.Reservation(serve.port, profile.name, new, basis, profile.guard.priority or 0)

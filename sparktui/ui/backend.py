"""The panel's live calls into core and runtime (profiles, the fit, the supervisor, memory), returning
`ui.viewmodels`; turning records into views is `ui.translate`'s.

Every call here may do I/O; the panes call them only from workers. A part that cannot work here
raises `Unavailable` with a sentence a person can act on; the UI shows it in place of the
figures (never made-up data). core and runtime are imported inside the calls that need them
(in workers), so the first frame waits for none of them.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparktui.errors import UserError
from sparktui.ui.backend_models import ModelCalls
from sparktui.ui.speed_line import BenchHistory
from sparktui.ui.translate import (
    cluster_launched,
    entry_reservation,
    fit_view,
    gpu_view,
    launched,
    model_flag_suggestions,
    route_view,
    server_entry,
    server_status,
    show_beside,
)
from sparktui.ui.viewmodels import FitView, GpuView

if TYPE_CHECKING:
    from sparktui.core.config import ServeConfig
    from sparktui.core.fit import FitResult
    from sparktui.core.guard_lines import LineName
    from sparktui.core.machine import Machine
    from sparktui.core.modelspec import ModelSpec
    from sparktui.core.profiles import Profile
    from sparktui.runtime.host.memory import MemorySample
    from sparktui.runtime.records.protocol import StateRecord
    from sparktui.runtime.records.state_watch import StateDirWatch
    from sparktui.ui.serverviews import Launched, RouteView, ServerEntry, ServerStatus


class Unavailable(Exception):
    """This part cannot work here (no NVML, no vLLM, no supervisor…); str() says why."""


def _free_lists(live: bool) -> int:
    """The free pages on the kernel's per-CPU lists when the fit is judged on this host's reading
    (preflight reads them too: a start-up that fits only with them is tight, not "won't start")."""
    if not live:
        return 0
    from sparktui.runtime.host.memory import read_per_cpu_free

    return read_per_cpu_free()


class Backend(ModelCalls):
    """The live implementation over sparktui.core and sparktui.runtime (profiles and models: ModelCalls)."""

    _history = BenchHistory()

    def host(self) -> str:
        return socket.gethostname()

    def postmortems(self) -> list[str]:
        """Post-mortems of servers the machine went down under, each returned once (runtime.watch)."""
        from sparktui.runtime.records import state as st
        from sparktui.runtime.watch import check_after_reboot

        return [pm.render() for pm in check_after_reboot(st.state_dir())]

    def warnings(self, listener: Callable[[str], object]) -> Callable[[], None]:
        """Each warning about state not trusted (a state folder others may write in, say), once: those
        said so far, then each new one from the thread that says it (files.Warnings). Returns the
        call that stops them."""
        from sparktui import files

        return files.WARNINGS.subscribe(listener)

    # -- memory and GPU ---------------------------------------------------------------------------
    def memory(self) -> MemorySample:
        from sparktui.runtime.host.memory import read_memory

        return read_memory()

    def gpu(self) -> GpuView:
        from sparktui.runtime.host.memory import read_gpu

        return gpu_view(read_gpu())

    def routes(self) -> tuple[RouteView, ...]:
        """The `sparktui route`s running on this machine (their records in the state dir)."""
        from sparktui.runtime.route.record import read_routes

        return tuple(route_view(r) for r in read_routes())

    # -- the machine and the fit (profiles and models: ModelCalls) -------------------------------
    def machine(self, name: str) -> Machine:
        from sparktui.core.machine import host_for, machine_from_name, reads_host

        meminfo = None
        if reads_host(name):  # a Spark's profile takes this host's total when the host is one, as `fit` does
            try:
                meminfo = self.meminfo()
            except OSError:
                if str(name).strip().lower() == "auto":
                    raise
        return machine_from_name(name, host_for(name, meminfo))

    def meminfo(self) -> str:
        """This host's /proc/meminfo text (the machine a profile names may be this host)."""
        from sparktui.runtime.host.memory import MEMINFO

        return Path(MEMINFO).read_text()

    def fit(
        self,
        config: ServeConfig,
        spec: ModelSpec,
        machine: Machine,
        sample: MemorySample | None,
        vllm_version_source: str = "",
        others: Sequence[ServerEntry] = (),
    ) -> FitView:
        """Fit against this host's MemAvailable only when the profile's machine is this host, and
        beside what the other running servers reserve (`others`: the server list; the one on the
        form's port is the one a launch replaces, and is left out as preflight does)."""
        from sparktui.core.fit import fit
        from sparktui.core.machine import reading_applies

        live = sample is not None and reading_applies(machine, sample.mem_total)
        mem_available = sample.mem_available if sample is not None and live else None
        mem_free = sample.mem_free if sample is not None and live else None  # an old vLLM's own figure
        result = fit(
            config,
            spec,
            machine,
            mem_available=mem_available,
            vllm_version_source=vllm_version_source,
            mem_free=mem_free,
            free_lists=_free_lists(live),
            calibration=self._calibration(config, spec, machine),
            speed=False,  # estimated once, below, with the bench history (speed_line)
        )
        view = fit_view(result, machine)
        view.mem_available_live = live
        beside = [e for e in others if e.live and e.port != config.port]
        if beside:
            from sparktui.core import pool  # only beside other servers: not for a first fit alone

            # core's pool verdict, on the machine this fit was judged on (as `sparktui fit` judges it)
            reservations = [entry_reservation(e, machine) for e in beside]
            show_beside(view, result.verdict, pool.beside_others(machine, config, result.budget, reservations))
        view.suggestions += model_flag_suggestions(spec, config, view.suggestions)
        host_mem_total = sample.mem_total if sample is not None else None
        view.speed = self._history.speed_line(config, spec, machine, result, host_mem_total)
        return view

    def _calibration(self, config: ServeConfig, spec: ModelSpec, machine: Machine) -> Any:
        """What a launch of this model, vLLM version and machine measured on this box, as
        `sparktui fit` finds it (runtime/calibrations.py); None when there is none or it cannot be read."""
        from sparktui.core.calibration import best_match
        from sparktui.core.fit_key import calibration_key
        from sparktui.runtime import calibrations

        try:
            key = calibration_key(config, spec, machine)
        except UserError:
            return None
        return best_match(calibrations.load(), key.model, key.vllm_version, key.machine, key.flags)

    def grid(
        self, config: ServeConfig, spec: ModelSpec, machine: Machine, sample: MemorySample | None, source: str = ""
    ) -> Any:
        """The trade-off grid (core.grid.Grid) around the form, each cell fitted as `fit` fits the
        form (this host's MemAvailable only when the profile's machine is this host)."""
        from sparktui.core.fit import fit
        from sparktui.core.grid import build_grid
        from sparktui.core.machine import reading_applies

        live = sample is not None and reading_applies(machine, sample.mem_total)
        mem_available = sample.mem_available if sample is not None and live else None

        free_lists = _free_lists(live)

        def run_fit(cell: ServeConfig) -> FitResult:
            return fit(
                cell,
                spec,
                machine,
                mem_available=mem_available,
                vllm_version_source=source,
                free_lists=free_lists,
                speed=False,  # the grid shows verdicts, no speed: a cell's estimate would go unread
            )

        return build_grid(config, spec, machine, run_fit(config), run_fit)

    def detect_vllm_version(self, profile: Any) -> Any:
        """Which vLLM the profile's runner has, from files only (no `vllm --version` from the TUI)."""
        from sparktui.runtime.launch.vllm_version import detect

        try:
            return detect(profile, run=False)
        except (OSError, ValueError):
            return None

    # -- the server, through the supervisor ---------------------------------------------------------
    def runner_problem(self, profile: Profile) -> str | None:
        """Why this profile's vLLM cannot be started here (not installed, bad runner), or None."""
        from sparktui.runtime.launch.runner import build_command

        try:
            build_command(profile)
        except UserError as exc:
            return str(exc)
        return None

    def attach(self, port: int | None = None) -> ServerStatus | None:
        """The server on `port` (the one this app follows), else the newest live one, else None.

        A live server is asked through its socket (a `status` request): that is also what keeps
        the supervisor reading /metrics while the panel watches."""
        from sparktui.runtime.records import state as state_mod
        from sparktui.runtime.records.protocol import ProtocolError

        try:
            if port is not None:
                record = state_mod.read_state(state_mod.state_path(port))
                if record is not None:
                    return self._with_tree(server_status(self._live(state_mod.with_liveness(record))))
            # Only servers recorded in this state dir: list_states also finds every supervisor of
            # this user by its socket (other state dirs too), which is not the panel's to follow.
            live = [s for s in state_mod.list_states() if s.alive and state_mod.state_path(s.port).exists()]
        except ProtocolError as exc:  # a wrong-shaped state file
            raise Unavailable(str(exc)) from None
        return self._with_tree(server_status(self._live(live[0]))) if live else None

    def pool_bytes(self, sample: MemorySample) -> int:
        """What all servers on this host together may reserve (core.pool), from a memory sample."""
        from sparktui.core.machine import Machine
        from sparktui.core.pool import pool_bytes

        return pool_bytes(Machine.from_reading(sample.mem_total, sample.mem_available))

    def servers(self) -> list[ServerEntry]:
        """Every server recorded in this state dir (ended ones too: the pane says how one ended),
        newest first. Files only (no socket request): cheap enough to read whenever one changes."""
        from sparktui.runtime.records import state as state_mod
        from sparktui.runtime.records.protocol import ProtocolError

        out = []
        for path in (state_mod.state_dir() / "servers").glob("*.json"):
            try:
                record = state_mod.read_state(path)
            except ProtocolError:
                continue  # `sparktui status` names a wrong-shaped file; the list goes on without it
            if record is None:
                continue
            out.append(server_entry(state_mod.with_liveness(record)))
        out.sort(key=lambda e: (-e.started_at, e.port))
        return out

    def watch_servers(self) -> StateDirWatch:
        """Iterates once per change of the servers' records, until closed (runtime.state_watch:
        no CPU while none changes)."""
        from sparktui.runtime.records import state as state_mod
        from sparktui.runtime.records.state_watch import StateDirWatch

        return StateDirWatch(state_mod.state_dir())

    def _live(self, record: StateRecord) -> StateRecord:
        if not record.alive:
            return record
        from sparktui.runtime.records import state as state_mod

        return state_mod.ask_live(record.port, metrics=True) or record  # no answer: the file is still the truth

    def _with_tree(self, status: ServerStatus) -> ServerStatus:
        if status.pid and status.live:
            try:
                from sparktui.runtime.host.memory import tree_memory

                tree = tree_memory(status.pid)
            except OSError:
                return status
            from dataclasses import replace

            return replace(status, tree_bytes=tree.total_bytes, tree_procs=len(tree.pids))
        return status

    def launch(self, profile: Profile, force: bool = False) -> Launched:
        """Start a detached supervisor; force: start even what the preflight fit refuses. A profile
        with [cluster] starts its whole cluster as `sparktui serve --detach` does (every node
        checked over SSH, the workers there, the head here), never a lone head. What the preflight
        found comes back with the state, as `sparktui serve` prints it."""

        from sparktui.runtime.server import launcher

        if profile.cluster is not None:
            from sparktui.runtime.server.cluster_launch import launch_detached

            return cluster_launched(launch_detached(profile, profile.serve, force=force), profile)
        state = launcher.launch(profile, detach=True, force=force)
        return launched(server_status(state), [], state.preflight_warnings, profile)

    def stop(self, status: ServerStatus) -> ServerStatus:

        from sparktui.runtime.server import client

        return server_status(client.stop(status.port))

    def kill(self, status: ServerStatus) -> ServerStatus:

        from sparktui.runtime.server import client

        return server_status(client.kill(status.port))

    def restart(self, status: ServerStatus | None, profile: Profile) -> Launched:

        from sparktui.runtime.server import client

        if status is not None and status.live:
            client.stop(status.port)  # a cluster's head stops its workers too
        return self.launch(profile)

    def set_guard(
        self, status: ServerStatus, armed: bool | None = None, lines: Mapping[LineName, float | None] | None = None
    ) -> ServerStatus:
        """Arm/disarm and/or move the lines of the guard of a running server, live, through its supervisor
        (`lines`: only the lines to move, by name, in GiB; None turns one off)."""
        from sparktui.runtime.records import state as state_mod
        from sparktui.runtime.server.client import refuse_lines_above_free

        try:
            refuse_lines_above_free(lines, force=False)  # as `sparktui set-guard` without --force
            reply = state_mod.request(
                status.port, state_mod.guard_request(armed, dict(lines) if lines is not None else None), timeout=10
            )
        except UserError as exc:
            raise Unavailable(str(exc)) from None
        if not reply.ok or reply.state is None:
            raise Unavailable(
                f"the supervisor on port {status.port} cannot change its guard: {reply.error or 'no reason given'}"
            )
        reply.state.alive = True
        return self._with_tree(server_status(reply.state))

    def follow_log(self, path: Path, stop: threading.Event) -> Iterator[list[str]]:
        """Batches of lines from `path` (from its start), as the file grows, until `stop` is set."""
        # Small reads keep each hold of the GIL short, so keys stay quick while a flood is read.
        from sparktui.runtime.server.logtail import LogTail

        with LogTail(path, keep=1, chunk_bytes=1 << 16) as tail:
            yield from tail.follow(interval_s=0.1, stop=stop)


__all__ = [
    "Backend",
    "Unavailable",
    "cluster_launched",
    "entry_reservation",
    "fit_view",
    "gpu_view",
    "launched",
    "model_flag_suggestions",
    "server_entry",
    "server_status",
    "show_beside",
]

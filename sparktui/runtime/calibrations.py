"""The calibrations file: what vLLM measured at start-ups on this box (core/calibration.py).

Private (0600, in the 0700 state folder), written atomically; an unreadable or foreign file reads
as empty (it is a cache of figures, never a reason to refuse a fit), as does one another user owns
or may write, or one in a folder not ours alone: a planted figure would pass a fit that won't start."""

from __future__ import annotations

import datetime
from typing import Any

from sparktui.atomic import atomic_write_text
from sparktui.core.calibration import Calibration, dump_store, load_store, with_record
from sparktui.core.config import ServeConfig
from sparktui.errors import UserError
from sparktui.files import Untrusted, read_regular, warn_untrusted
from sparktui.paths import calibrations_path

# A record is ~1.5 KiB: 64 MiB holds some 40,000 launches; a larger file is not one sparktui wrote
CALIBRATIONS_LIMIT = 64 << 20


def load() -> list[Calibration]:
    """The kept records; none when the file is missing or unreadable, including one that is no
    regular file (a FIFO there hung every fit) or larger than CALIBRATIONS_LIMIT (never read whole).
    One that is not ours alone, or in a folder not ours alone, is not believed: a warning says why."""
    try:
        data = read_regular(calibrations_path(), CALIBRATIONS_LIMIT, "calibrations file", own=True)
        return load_store(data.decode())
    except Untrusted as exc:
        warn_untrusted(exc, "the fit uses no calibration from it")  # once: the panel asks at every fit
        return []
    except (OSError, UnicodeDecodeError, UserError):
        return []


def record(new: Calibration) -> None:
    """Keep `new`, replacing the record of the same model, version, machine and flags."""
    atomic_write_text(calibrations_path(), dump_store(with_record(load(), new)), private=True)


def record_launch(
    profile: Any, serve: ServeConfig, log_text: str, log_path: str, mem_total: int, mem_available: int | None
) -> Calibration:
    """Keep what vLLM measured at this launch (its start-up log up to the KV cache), keyed by the
    profile's machine as the preflight fit judged it; UserError when the log lacks the figures."""
    from sparktui.core.calibration import read_log_figures, release_version
    from sparktui.core.fit_key import calibration_of_log
    from sparktui.core.machine import Machine, host_machine
    from sparktui.core.modelspec import load_serving_spec

    figures = read_log_figures(log_text)  # read once: the version and the calibration
    if not serve.vllm_version:  # the log says which vLLM ran
        version = release_version(figures.version)
        if version is not None:
            serve = serve.replace(vllm_version=str(version))
    spec = load_serving_spec(serve.model, serve.speculation)
    machine = host_machine(profile.machine, Machine.from_reading(mem_total, mem_available))
    calibration = calibration_of_log(
        serve, spec, machine, figures, where=log_path, source="measured", date=datetime.date.today().isoformat()
    )
    record(calibration)
    return calibration

"""The panel's calls about profiles and models: list, load and save profiles; a model's spec, whether
its weights are downloaded, and their download; the local and catalog models, and the advisor's
verdicts over them. `ui.backend.Backend` takes them as `ModelCalls`; as there, each may do I/O
(panes call them from workers) and imports core and runtime inside the call.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparktui.errors import UserError

if TYPE_CHECKING:
    from sparktui.core.config import ServeConfig
    from sparktui.core.machine import Machine
    from sparktui.core.modelspec import ModelSpec
    from sparktui.core.profiles import Profile, ProfileRef
    from sparktui.core.speed import Hardware


def _hardware(machine: Machine) -> Hardware | None:
    """The speed model's hardware for the machine, its bandwidth from SPARKTUI_BANDWIDTH_GBS when set
    (a bad value is a UserError naming it, as `sparktui advise` says)."""
    from sparktui.core import speed as sp
    from sparktui.core.fit_speed import bandwidth_setting

    found = sp.hardware_for(machine.name, machine.mem_total, machine.unified)
    return sp.with_bandwidth(found, bandwidth_setting(None, os.environ), machine.name)


class ModelCalls:
    """Profiles and models, for the panel (a part of Backend)."""

    def list_profiles(self) -> list[ProfileRef]:
        """The user's profiles first, then the shipped ones, each sorted by name."""
        from sparktui.core.profiles import list_profiles

        return sorted(list_profiles(), key=lambda ref: (ref.source != "user", ref.name))

    def load_profile(self, name_or_path: str | Path) -> Profile:
        from sparktui.core.profiles import load_profile

        return load_profile(name_or_path)

    def save_profile(self, profile: Profile, path: Path) -> None:
        from sparktui.core.profiles import save_profile

        save_profile(profile, path)

    def model_downloaded(self, model: str) -> bool | None:
        """Whether a Hugging Face repo id's weights are in the local cache; None for what is no repo
        id (a local folder) or what the panel cannot download."""
        from sparktui.runtime import download

        if os.path.exists(os.path.expanduser(model)):
            return None
        try:
            download.check_repo_id(model)
        except UserError:
            return None
        return download.is_downloaded(model)

    def download_plan(self, model: str) -> Any:
        """runtime.download's plan: what is left to fetch and whether the disk has the room."""
        from sparktui.runtime import download

        return download.plan(model)

    def download(self, plan: Any, on_progress: Any) -> Path:
        from sparktui.runtime import download

        return download.fetch(plan, on_progress)

    def model_spec(self, model: str) -> ModelSpec:
        # a repo id that is not downloaded: its configs and safetensors headers are fetched (once,
        # cached; never with HF_HUB_OFFLINE=1). This runs in a worker, off the UI thread.
        from sparktui.core.modelspec import load_model_spec
        from sparktui.runtime.hub import HubFetcher

        return load_model_spec(model, fetcher=HubFetcher())

    def local_models(self) -> list[str]:
        """Repo ids in the local Hugging Face cache (with a config.json), then the built-in catalog."""
        from sparktui.core.modelspec import catalog_names, hub_dirs

        cached: list[str] = []
        for hub in hub_dirs():
            for folder in sorted(hub.glob("models--*")):
                if any(folder.glob("snapshots/*/config.json")):
                    repo = folder.name.removeprefix("models--").replace("--", "/")
                    if repo not in cached:
                        cached.append(repo)
        return cached + [name for name in catalog_names() if name not in cached]

    def advise(self, config: ServeConfig, machine: Machine) -> list[Any]:
        """core.advisor's verdicts for every local or catalog variant of the form's model, at its
        --max-model-len (32768 when unset) for one user, best predicted speed first."""
        from sparktui.core import advisor
        from sparktui.core.modelspec import load_model_spec

        names = [n for n in self.local_models() if advisor.in_family(config.model, n)]
        if config.model not in names:
            names.insert(0, config.model)
        specs = []
        for name in names:
            try:
                specs.append(load_model_spec(name))
            except UserError:
                continue
        hardware = _hardware(machine)
        context = config.max_model_len if config.max_model_len and config.max_model_len > 0 else 32768
        return list(
            advisor.advise(
                specs, machine, hardware, context=context, users=1, utilization=config.gpu_memory_utilization
            )
        )

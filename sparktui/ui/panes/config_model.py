"""The config pane's model actions: pick a model (F3), paste a `vllm serve` line (F4), this model's
variants (F12), and its download (F11, offered when the weights are not in the Hugging Face cache).

A child of the pane with nothing to draw (its output is dialogs and notices): it owns these
actions' workers, and fills the pane's form with what was chosen.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from textual.widget import Widget
from textual.widgets import Input

from sparktui.errors import UserError
from sparktui.ui.backend import Unavailable
from sparktui.ui.messages import Notice
from sparktui.ui.panes.base import backend_of, io_worker, post_up
from sparktui.ui.panes.config_fit import FitBox, ProfileForm
from sparktui.ui.widgets.editor import ConfigEditor

if TYPE_CHECKING:
    from sparktui.core.config import ServeConfig
    from sparktui.ui.backend import Backend


class ModelActions(Widget):
    """Nothing to draw (app.tcss hides it): dialogs and notices are its output."""

    @property
    def backend(self) -> Backend:
        return backend_of(self)

    @property
    def pane(self) -> ProfileForm:
        return cast("ProfileForm", self.parent)  # the config pane (not imported: it imports this module)

    def _field(self, name: str) -> Input:
        return self.screen.query_one(f"#flag-{name}", Input)

    # -- the model's weights: offered for download when they are not in the Hugging Face cache ---

    @io_worker("model-downloaded", "looking for the model in the Hugging Face cache", group="download-check")
    def check_downloaded(self, model: str) -> None:
        try:
            downloaded = self.backend.model_downloaded(model)
        except (UserError, Unavailable, OSError):
            return
        if downloaded is False:
            self.app.call_from_thread(self._offer_download, model)

    def _offer_download(self, model: str) -> None:
        from sparktui.ui.actions import ACTIONS, key_label, keys_for

        action = next(a for a in ACTIONS if a.id == "config.download")
        key = key_label(keys_for(action, cast(Any, self.app).keymap))
        self.app.notify(
            f"{model} is not downloaded yet: {key} (or the palette's Download) fetches it into the Hugging Face "
            "cache, with the free disk checked first",
            title="Model",
            timeout=20,
        )

    def action_download_model(self) -> None:
        config = self.pane.form.config
        if config is None:
            self.app.notify("fix the form first: the model to download is its model", severity="error")
            return
        self._download(config.model)

    @io_worker("download", "downloading the model", group="download")
    def _download(self, model: str) -> None:
        try:
            if self.backend.model_downloaded(model) is None:
                post_up(self, Notice(f"{model}: not a Hugging Face repo id to download (a local folder?)", "error"))
                return
            plan = self.backend.download_plan(model)
        except (UserError, Unavailable, OSError) as exc:
            post_up(self, Notice(str(exc), "error"))
            return
        if not plan.fits:
            post_up(
                self,
                Notice(
                    f"{model}: not enough disk: {plan.need_bytes / 2**30:.2f} GiB to fetch + "
                    f"{plan.reserve_bytes / 2**30:.2f} GiB kept free, {plan.free_bytes / 2**30:.2f} GiB free in "
                    f"{plan.cache}; nothing was downloaded",
                    "error",
                ),
            )
            return
        total = max(1, plan.need_bytes + plan.partial_bytes)
        done: dict[str, int] = {}
        said = [-1]

        def progress(name: str, n: int, size: int) -> None:
            done[name] = n
            step = int(100 * sum(done.values()) / total) // 25  # a notice at 0, 25, 50, 75 %
            if step != said[0] and step < 4:
                said[0] = step
                post_up(self, Notice(f"downloading {model}: {25 * step}% of {total / 2**30:.2f} GiB ({name})"))

        post_up(self, Notice(f"downloading {model}: {plan.describe()}"))
        try:
            folder = self.backend.download(plan, progress)
        except (UserError, Unavailable, OSError) as exc:
            post_up(self, Notice(f"{exc} (what came is kept: download again to resume)", "error"))
            return
        post_up(self, Notice(f"downloaded {model} to {folder}"))
        self.app.call_from_thread(self._downloaded)

    def _downloaded(self) -> None:
        self.screen.query_one(FitBox).recompute_fit()

    # -- a model from the cache or the catalog, a pasted command, this model's variants ------------

    def action_paste_command(self) -> None:
        from sparktui.core.command_line import read_pasted, split_command
        from sparktui.core.config import parse_serve_command, utilization_left_to_vllm
        from sparktui.ui.screens import PromptScreen  # a dialog: loaded when first opened

        def check(text: str) -> tuple[ServeConfig, list[str]]:
            if not text.strip():
                raise UserError("paste a command such as: vllm serve org/model --max-model-len 32k")
            line = read_pasted(split_command(text))  # as `sparktui fit -- …` reads it
            config = parse_serve_command(line.words)
            if line.image is not None and config.vllm_version is None:  # the tag says which vLLM, as `fit` reads it
                from sparktui.runtime.launch.vllm_version import from_image

                tagged = from_image(line.image, inspect=False)
                # model_copy keeps what the line set (replace would mark every field given)
                config = config.model_copy(update={"vllm_version": tagged[0]}) if tagged else config
            return config, sorted(line.env)

        def done(read: object) -> None:
            if not isinstance(read, tuple):
                return
            config: ServeConfig = read[0]
            env_names: list[str] = read[1]
            self.screen.query_one(ConfigEditor).load(config)
            self.app.notify("loaded the pasted command into the form")
            if env_names:  # names only: values may be secrets
                self.app.notify(
                    f"not in the form: the line's environment {', '.join(env_names)} (a profile's [env] holds it)",
                    severity="warning",
                )
            left = utilization_left_to_vllm(config)
            if left is not None:  # the form is launched by sparktui, which passes its own: say both, as `fit` does
                self.app.notify(left[1], severity="warning")
            extra = getattr(config, "extra_args", None)
            if extra:
                self.app.notify(f"kept as extra arguments: {' '.join(extra)}", severity="warning")

        self.app.push_screen(
            PromptScreen(
                "Paste a `vllm serve` command line", check, placeholder="vllm serve org/model --max-model-len 32k …"
            ),
            done,
        )

    def action_pick_model(self) -> None:
        self._list_models()

    @io_worker("list-models", "listing local models", group="models")
    def _list_models(self) -> None:
        try:
            models = self.backend.local_models()
        except (UserError, Unavailable, OSError) as exc:
            post_up(self, Notice(f"local models: {exc}", "error"))
            return
        self.app.call_from_thread(self._choose_model, models)

    def _choose_model(self, models: list[str]) -> None:
        from sparktui.ui.screens import ChoiceScreen  # a dialog: loaded when first opened

        def chosen(model: object) -> None:
            if model is not None:
                self._field("model").value = str(model)

        self.app.push_screen(
            ChoiceScreen(
                "Models: the local Hugging Face cache, then sparktui's catalog",
                [(m, m) for m in models],
                empty="no models in the local Hugging Face cache or the catalog",
            ),
            chosen,
        )

    def action_advise(self) -> None:
        config, machine = self.pane.form.config, self.screen.query_one(FitBox).machine
        if config is None or machine is None:
            self.app.notify("fill in the model first", severity="warning")
            return
        self._advise(config, machine)

    @io_worker("advise", "fitting the model's variants", group="advise")
    def _advise(self, config, machine) -> None:
        try:
            advice = self.backend.advise(config, machine)
        except (UserError, Unavailable, OSError) as exc:
            post_up(self, Notice(f"advise: {exc}", "error"))
            return
        self.app.call_from_thread(self._choose_variant, advice)

    def _choose_variant(self, advice: list) -> None:
        from sparktui.ui.screens import ChoiceScreen  # a dialog: loaded when first opened

        def chosen(pick: Any) -> None:  # a core.advisor.Advice, or None when dismissed
            if pick is None:
                return
            self._field("model").value = pick.model
            if not pick.fits and pick.longest_context_for_users:
                self._field("max_model_len").value = str(pick.longest_context_for_users)

        def label(a) -> str:
            who = "1 user" if a.users == 1 else f"{a.users} users"
            rate = "-" if a.per_user_tok_s is None else f"{a.per_user_tok_s:.0f} tok/s ({who} at {a.context:,} ctx)"
            fits = (
                "fits"
                if a.fits
                else f"fits up to {a.longest_context_for_users:,}"
                if a.longest_context_for_users
                else "no"
            )
            return (
                f"{a.model}  {a.format}  {a.weights_bytes / 2**30:.0f} GiB  {fits}  {rate}  ctx ≤ {a.longest_context:,}"
            )

        self.app.push_screen(
            ChoiceScreen(
                "Variants of this model (best predicted speed first)",
                [(label(a), a) for a in advice],
                empty="no variant of this model in the local cache or the catalog",
            ),
            chosen,
        )

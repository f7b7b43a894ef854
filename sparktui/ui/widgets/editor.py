"""The configuration editor: one form row per flag of `sparktui.core.config.FLAGS`.

Each row is typed by its flag (Input for numbers and text, Select for closed choices, Switch for
booleans, a three-way Select for "unset / on / off"), and shows the flag's own validation
message inline. On every change the editor posts `ConfigEditor.Changed` with the new
ServeConfig (or the errors), so the fit panel can recompute.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from textual import on
from textual.containers import Horizontal, VerticalScroll
from textual.css.query import NoMatches
from textual.message import Message
from textual.suggester import SuggestFromList
from textual.widget import Widget
from textual.widgets import Input, Label, Select, Static, Switch

from sparktui.errors import UserError
from sparktui.ui.widgets.forminput import FormInput
from sparktui.ui.widgets.formselect import FormSelect

if TYPE_CHECKING:
    from textual.dom import DOMNode

    from sparktui.core.config import ServeConfig
    from sparktui.core.flag import Flag


def _flags():
    # Imported on first use, after the first frame: the flag table pulls in pydantic (~0.2 s).
    from sparktui.core import config

    return config


def _categories() -> tuple[str, ...]:
    from sparktui.core.flag import CATEGORIES

    return CATEGORIES


TRISTATE = [("on", True), ("off", False)]


def _field_text(flag: Flag, value: Any) -> str:
    if value is None:
        return ""
    if flag.allow_auto and value == -1:
        return "auto"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _placeholder(flag: Flag) -> str:
    if flag.positional:
        return "org/model or /path/to/model (F3: pick from cache)"
    if flag.default is None:
        return "unset: vLLM decides"
    return f"default {flag.default}"


@dataclass
class FormState:
    config: ServeConfig | None
    errors: dict[str, str]  # field -> message
    general: str | None = None


class ConfigEditor(VerticalScroll):
    """The form. `load(config)` fills it; edits post `Changed`."""

    DEFAULT_CSS = """
    ConfigEditor { height: 1fr; scrollbar-size-vertical: 1; }
    ConfigEditor .cat { color: $accent; text-style: bold; margin-top: 1; }
    ConfigEditor .row { height: auto; }
    ConfigEditor .row > .name { width: 23; color: $foreground-muted; }
    ConfigEditor .row > Input, ConfigEditor .row > Select { width: 1fr; }
    ConfigEditor .row > Switch { width: 8; height: 1; border: none; padding: 0; }
    ConfigEditor .row > Switch:focus { background-tint: $foreground 10%; }
    ConfigEditor .problem { color: $error; display: none; }
    ConfigEditor .problem.-shown { display: block; }
    """

    class Changed(Message):
        def __init__(self, state: FormState) -> None:
            super().__init__()
            self.state = state

    def __init__(self, wait_for_load: bool = False, **kwargs) -> None:
        super().__init__(**kwargs)
        # a profile is on its way: the first rows are built when it comes, holding its values (an
        # empty form first would be laid out, drawn and fitted for nothing)
        self._wait_for_load = wait_for_load
        self._build_started = False
        self._extra_args: list[str] = []
        self._loading = False
        self._pending: ServeConfig | None = None
        self.built = False
        self._mounted: set[str] = set()  # fields whose rows exist
        self._values: dict[str, Any] = {}  # the last loaded config, for rows not mounted yet
        self._building_rest = False
        self._rest_wanted = False
        self._problems: dict[str, str] = {}  # problem line id -> the message it shows ("" for none)

    def on_mount(self) -> None:
        # The rows (about a hundred widgets) come after the first frame, so it shows sooner.
        if not self._wait_for_load:
            self.call_after_refresh(self.build)

    def build(self) -> None:
        """Mount the first rows, once (holding the config a load left pending, if any)."""
        if not self._build_started:
            self._build_started = True
            self.call_later(self._build)

    # The first category (the model: what an 80×24 screen shows of the form) is mounted before the
    # first load; the rest once the screen is full (`build_rest`, called by the config pane after
    # the first fit), so the first fit waits for a third of the widgets only. Until then read()
    # takes their values from the loaded config.
    EAGER_CATEGORIES = 1
    REST_AFTER_S = 3.0  # the rest come anyway (no profile to load, or no fit to wait for)

    def _rows(
        self, categories: Sequence[str], values: dict[str, Any] | None = None, first: bool = False
    ) -> tuple[list[Widget], list[str]]:
        """The widgets of these categories' rows (holding `values`), and their fields (mounted once
        they are in the DOM). The `first` screen's selects are drawn as text until `_build_rest`."""
        config = _flags()
        widgets: list[Widget] = []
        fields: list[str] = []
        for category in categories:
            flags = [f for f in config.FLAGS if f.category == category]
            if not flags:
                continue
            widgets.append(Label(category.capitalize(), classes="cat"))
            for flag in flags:
                name = Label(flag.key if not flag.positional else "model", classes="name")
                control = self._control(flag, values, as_text=first)
                widgets.append(Horizontal(name, control, classes="row"))
                fields.append(flag.field)
        return widgets, fields

    async def _build(self) -> None:
        pending = self._pending
        values = {flag.field: getattr(pending, flag.field) for flag in _flags().FLAGS} if pending else None
        widgets, fields = self._rows(_categories()[: self.EAGER_CATEGORIES], values, first=True)
        await self.mount_all(widgets)  # in the DOM before load() looks the controls up
        self._mounted.update(fields)
        self.built = True
        self.set_timer(self.REST_AFTER_S, self._build_rest)
        if self._pending is not None:
            self.load(self._pending)
        if self._rest_wanted:
            self.call_after_refresh(self._build_rest)

    @property
    def complete(self) -> bool:
        """Every row is mounted."""
        return len(self._mounted) == len(_flags().FLAGS) if self.built else False

    def build_rest(self) -> None:
        """Mount the rows the first screen did not need (once the screen is full)."""
        self._rest_wanted = True
        if self.built:  # else _build calls it, after the first rows: they stay first
            self.call_after_refresh(self._build_rest)

    async def _build_rest(self) -> None:
        for select in self.query(FormSelect):  # the first screen's, drawn as text until now
            select.as_widgets()
        categories = _categories()[self.EAGER_CATEGORIES :]
        if self._building_rest or not categories:
            return
        self._building_rest = True
        # Built holding the loaded values: set after the mount, they could overwrite a key typed
        # into a row meanwhile.
        values = dict(self._values)
        widgets, fields = self._rows(categories, values)
        await self.mount_all(widgets)
        self._mounted.update(fields)
        self._loading = True
        try:
            for flag in _flags().FLAGS:  # a profile loaded during the mount
                if flag.field in fields and self._values.get(flag.field) != values.get(flag.field):
                    self._set_control(flag, self._values.get(flag.field))
        finally:
            self._loading = False

    def _control(
        self, flag: Flag, values: dict[str, Any] | None = None, as_text: bool = False
    ) -> Switch | Select[Any] | Input:
        """The flag's control, holding its value in `values` when there is one (as `_set_control`
        would show it), else its default. A select `as_text` has no parts yet (FormSelect)."""
        wid = f"flag-{flag.field}"
        tip = f"{flag.name}: {flag.help}\nExpects {flag.expected()}."
        given = values is not None and flag.field in values
        value = values[flag.field] if values is not None and given else None
        if flag.type == "bool" and not flag.optional:
            control: Switch | Select[Any] | Input = Switch(value=bool(value if given else flag.field_default), id=wid)
        elif flag.type == "bool":
            control = FormSelect(
                TRISTATE,
                prompt="unset (vLLM default)",
                allow_blank=True,
                value=Select.NULL if value is None else value,
                id=wid,
                compact=True,
                as_text=as_text,
            )
        elif flag.type == "choice" and not flag.open_choices:
            shown = value if given else flag.field_default
            control = FormSelect(
                [(c, c) for c in flag.choices],
                prompt="unset",
                allow_blank=flag.optional,
                value=Select.NULL if shown is None else shown,
                id=wid,
                compact=True,
                as_text=as_text,
            )
        else:
            suggester = SuggestFromList(list(flag.choices), case_sensitive=False) if flag.choices else None
            # no select-all on focus: Tab into the model field, then one key, must not wipe it
            control = FormInput(
                value=_field_text(flag, value),
                placeholder=_placeholder(flag),
                password=flag.secret,
                suggester=suggester,
                id=wid,
                compact=True,
                select_on_focus=False,
            )
        control.tooltip = tip
        return control

    # -- reading and writing the form ------------------------------------------------------------

    def load(self, config: ServeConfig) -> None:
        """Fill the form from `config` (no Changed messages while filling; one at the end)."""
        if not self.built:
            self._pending = config  # filled in once the rows exist
            self.build()
            return
        self._pending = None
        self._loading = True
        try:
            self._values = {flag.field: getattr(config, flag.field) for flag in _flags().FLAGS}
            for flag in _flags().FLAGS:
                if flag.field in self._mounted:
                    self._set_control(flag, self._values[flag.field])
            self._extra_args = list(config.extra_args)
        finally:
            self._loading = False
        self.call_after_refresh(self._emit)

    def _set_control(self, flag: Flag, value: Any) -> None:
        control = self.query_one(f"#flag-{flag.field}")
        if isinstance(control, Switch):
            control.value = bool(value)
        elif isinstance(control, Select):
            control.value = Select.NULL if value is None else value
        else:
            cast(Input, control).value = _field_text(flag, value)  # the third kind _control makes

    def _raw(self, flag: Flag) -> Any:
        control = self.query_one(f"#flag-{flag.field}")
        if isinstance(control, Switch):
            return control.value
        if isinstance(control, Select):
            return None if control.value is Select.NULL else control.value
        text = cast(Input, control).value.strip()  # the third kind _control makes
        return text or None

    def read(self) -> FormState:
        values: dict[str, Any] = {}
        errors: dict[str, str] = {}
        for flag in _flags().FLAGS:
            if flag.field not in self._mounted:  # its row comes after the first frame: as loaded
                if self._values.get(flag.field) is not None:
                    values[flag.field] = self._values[flag.field]
                continue
            raw = self._raw(flag)
            if raw is None:  # empty: the flag's default (the model has none)
                if flag.positional:
                    errors[flag.field] = (
                        "model: required (a Hugging Face repo id or a local folder; F3 lists the local cache)"
                    )
                continue
            try:
                values[flag.field] = flag.coerce(raw)
            except UserError as exc:
                errors[flag.field] = str(exc)
        if errors:
            return FormState(None, errors)
        try:
            config = _flags().ServeConfig(**values, extra_args=self._extra_args)
        except UserError as exc:
            return FormState(None, {}, str(exc))
        return FormState(config, {})

    def _emit(self) -> None:
        state = self.read()
        for flag in _flags().FLAGS:
            if flag.field not in self._mounted:
                continue
            message = state.errors.get(flag.field, "")
            control = self.query_one(f"#flag-{flag.field}")
            self._say(f"problem-{flag.field}", message, control.parent)
            control.set_class(bool(message), "-invalid")
        self._say("general-problem", state.general or "")
        self.post_message(self.Changed(state))

    def _say(self, problem_id: str, message: str, row: DOMNode | None = None) -> None:
        """Show a problem line's message (under `row`; the form's own line at its top). Only a
        changed one is updated: Static.update lays the whole screen out again, and every keystroke
        in the form comes here for each of ~100 rows. A line is mounted the first time it has
        something to say: one per row, hidden, was a tenth of the first screen's widgets."""
        if self._problems.get(problem_id, "") == message:
            return
        self._problems[problem_id] = message
        try:
            problem = self.query_one(f"#{problem_id}", Static)
        except NoMatches:
            problem = Static(message, id=problem_id, classes="problem -shown")
            if isinstance(row, Widget):
                self.mount(problem, after=row)
            else:
                self.mount(problem, before=0 if self.children else None)
            return
        problem.update(message)
        problem.set_class(bool(message), "-shown")

    @on(Input.Changed)
    @on(Select.Changed)
    @on(Switch.Changed)
    def _edited(self, event: Message) -> None:
        event.stop()
        if self.built and not self._loading:
            self._emit()

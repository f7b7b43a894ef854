"""The guard's lines, one model: its names are the names every holder uses."""

from __future__ import annotations

import dataclasses

import pytest

from sparktui.core.guard_lines import GUARD_FIELDS, LINE_NAMES, GuardLines
from sparktui.core.profiles import GuardSettings
from sparktui.errors import UserError


def test_the_names_a_profile_and_set_guard_use_are_the_models_fields():
    assert tuple(f.name for f in dataclasses.fields(GuardLines)) == GUARD_FIELDS
    assert GUARD_FIELDS[:3] == LINE_NAMES


def test_a_setting_the_model_lacks_is_refused_by_name():
    with pytest.raises(UserError, match=r"unknown guard setting\(s\) kill_gib"):
        GuardLines.from_given({"kill_gib": 3.0})


def test_the_panels_edit_of_a_profiles_guard_keeps_its_other_settings_and_checks_the_order():
    settings = GuardSettings(lines={"grace_s": 2.0}, priority=3)
    moved = settings.changed(lines={"kill_below_gib": 8.0})
    assert moved.lines == {"grace_s": 2.0, "kill_below_gib": 8.0} and moved.priority == 3
    assert moved.guard_lines() == GuardLines(term_below_gib=None, kill_below_gib=8.0, grace_s=2.0)
    assert settings.lines == {"grace_s": 2.0}  # a copy: the loaded profile is not edited in place
    with pytest.raises(UserError, match="out of order"):
        settings.changed(lines={"warn_below_gib": 4.0, "kill_below_gib": 8.0})

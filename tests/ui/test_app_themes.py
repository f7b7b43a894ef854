"""Themes are data; settings persist atomically; bad files give errors naming file and field."""

from pathlib import Path

import pytest

from sparktui.errors import UserError
from sparktui.resources import data_dir
from sparktui.ui.settings import load_settings, save_theme
from sparktui.ui.themes import load_theme_file, load_themes, theme_dirs


def test_shipped_themes_load_dark_light_and_ansi_contrast():
    themes, errors = load_themes(theme_dirs(None))
    assert errors == []
    by_name = {t.name: t for t in themes}
    assert by_name["sparktui-dark"].primary.upper() == "#76B900" and by_name["sparktui-dark"].dark
    assert not by_name["sparktui-light"].dark
    contrast = by_name["sparktui-contrast"]
    assert contrast.ansi
    colours = [contrast.primary, contrast.error, contrast.warning, contrast.background, *contrast.variables.values()]
    assert all(c.startswith("ansi_") for c in colours), colours


@pytest.mark.parametrize(
    "text,field",
    [
        ('name = "x"\nprimary = "#76B900"\nerror = "reddish"\n', "'error'"),
        ('name = "x"\n', "'primary'"),
        ('primary = "#fff"\n', "'name'"),
        ('name = "x"\nprimary = "#fff"\ndark = "yes"\n', "'dark'"),
        ('name = "x"\nprimary = "#fff"\nprimery = "#fff"\n', "'primery'"),
        ('name = "x"\nprimary = "#fff"\n[variables]\nborder = "nope"\n', "'variables.border'"),
        ('name = "x"\nprimary = \n', "not valid TOML"),
    ],
)
def test_bad_theme_names_file_and_field(tmp_path, text, field):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(UserError) as err:
        load_theme_file(path)
    assert str(path) in str(err.value) and field in str(err.value)


def test_a_bad_theme_file_is_reported_and_the_others_still_load(tmp_path):
    (tmp_path / "bad.toml").write_text('name = "bad"\nprimary = 3\n')
    (tmp_path / "mine.toml").write_text('name = "mine"\nprimary = "ansi_red"\n')
    themes, errors = load_themes([data_dir("themes"), tmp_path])
    assert {"mine", "sparktui-dark"} <= {t.name for t in themes}
    assert len(errors) == 1 and "bad.toml" in errors[0] and "'primary'" in errors[0]


def test_theme_choice_is_saved_atomically_and_keeps_comments(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARKTUI_CONFIG_DIR", str(tmp_path))
    path = tmp_path / "config.toml"
    path.write_text('# my settings\n[keys]\n"server.launch" = "ctrl+l"\n')
    save_theme("sparktui-light")
    settings = load_settings()
    assert settings.theme == "sparktui-light"
    assert settings.keys == {"server.launch": "ctrl+l"}
    assert "# my settings" in path.read_text()
    assert [p.name for p in tmp_path.iterdir()] == ["config.toml"]  # no temp file left behind


def test_bad_settings_name_the_field(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text('[keys]\n"server.launch" = 5\n')
    with pytest.raises(UserError, match=r"keys\.server\.launch"):
        load_settings(path)
    path.write_text("theme = [1]\n")
    with pytest.raises(UserError, match="'theme'"):
        load_settings(path)
    assert load_settings(Path(tmp_path / "missing.toml")).theme is None


@pytest.mark.parametrize("content", [b"\xff\xfe theme", None], ids=["not UTF-8", "a folder"])
def test_settings_that_cannot_be_read_name_the_file(tmp_path, content):
    path = tmp_path / "config.toml"
    if content is None:
        path.mkdir()
    else:
        path.write_bytes(content)
    with pytest.raises(UserError, match=r"config\.toml: cannot read the settings"):
        load_settings(path)

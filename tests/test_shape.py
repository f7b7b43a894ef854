"""The shape of the package, read from its source: one word per thing, typed seams in core."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from tests.support import REPO

PACKAGE = REPO / "sparktui"
# What a parameter holding one of core's typed inputs is called: such a parameter is never `Any`
# (a ServeConfig, a ModelSpec, a record, a profile's settings, the guard's lines …)
MODEL_WORDS = ("config", "serve", "spec", "record", "state", "profile", "settings", "lines", "machine", "target")


def _trees(folder: Path) -> list[tuple[Path, ast.Module]]:
    return [(path, ast.parse(path.read_text(encoding="utf-8"))) for path in sorted(folder.rglob("*.py"))]


def test_every_class_name_in_sparktui_is_used_once():
    where: dict[str, list[str]] = defaultdict(list)
    for path, tree in _trees(PACKAGE):
        for node in ast.walk(tree):  # nested classes too (a pane's messages)
            if isinstance(node, ast.ClassDef):
                where[node.name].append(f"{path.relative_to(REPO)}:{node.lineno}")
    twice = {name: places for name, places in where.items() if len(places) > 1}
    assert not twice, f"one name, several classes: {twice}"


def test_no_parameter_in_core_holding_a_config_a_spec_or_a_record_is_annotated_any():
    found = []
    for path, tree in _trees(PACKAGE / "core"):
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            a = node.args
            for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs]:
                bare = arg.annotation is not None and ast.unparse(arg.annotation) in ("Any", "Any | None")
                words = arg.arg.lower().strip("_").split("_")
                if bare and any(word in MODEL_WORDS for word in words):
                    found.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name}({arg.arg}: Any)")
    assert not found, "typed inputs taken as Any:\n" + "\n".join(found)

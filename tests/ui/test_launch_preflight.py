"""What a launch's preflight found, in the panel: `ui.backend.cluster_launched` turns
runtime.cluster_launch's result (each node's summary, the warnings) into the server pane's lines,
with the profile's environment values blanked; the pane puts them atop that launch's log and says
the warnings in a notice. A supervisor seen through its record (no processes): a second or two.
The single-server launch through the real supervisor is in test_app_server.py."""

from __future__ import annotations

import dataclasses

import pytest

from sparktui.core.cluster import open_ports_note
from sparktui.core.profiles import load_profile
from sparktui.runtime.records.protocol import StateRecord
from sparktui.runtime.server.cluster_launch import ClusterLaunch
from sparktui.ui.app import SparkApp
from sparktui.ui.backend import cluster_launched
from sparktui.ui.serverviews import NodeView, ServerEntry
from sparktui.ui.widgets.logview import LogView
from sparktui.ui.widgets.serverlist import node_line
from tests.runtime.test_cluster_launch import cluster_profile
from tests.support import FIXTURES
from tests.support.app import RecordBackend, config_pane, record_notices, server_record, until, widget

pytestmark = pytest.mark.usefixtures("isolated")

# As runtime/cluster/node_checks.py writes them (judge_memory's summary, a node check's warning)
SUMMARIES = [
    "node node0 (head): MemAvailable 112.4 GiB, MemFree 96.3 GiB; its rank asks 38.2 GiB",
    "node node1 (rank 1): MemAvailable 110.9 GiB, MemFree 101.0 GiB; its rank asks 36.5 GiB",
]
NODE_WARNING = "node node1: vLLM 0.31.0 there, 0.32.0 here: install the same vLLM on every node"


def ready_log(tmp_path):
    log = tmp_path / "ready.log"
    log.write_text((FIXTURES / "vllm-cpu" / "startup_final_eager.log").read_text())
    return log


def a_cluster_launch(tmp_path, *warnings: str):
    profile = load_profile(cluster_profile(tmp_path))
    state = StateRecord.model_validate(server_record(ready_log(tmp_path), profile_path=tmp_path / "two-sparks.toml"))
    assert profile.cluster is not None
    return profile, ClusterLaunch(state, ["node1"], list(SUMMARIES), [*warnings, open_ports_note(profile.cluster)])


def test_a_cluster_launchs_preflight_becomes_the_panels_lines_summaries_then_warnings(tmp_path):
    profile, done = a_cluster_launch(tmp_path, NODE_WARNING)
    launched = cluster_launched(done, profile)
    assert launched.status.port == 8000 and launched.status.state == "ready"
    lines = [n.line() for n in launched.notes]
    assert lines == [
        f"[sparktui preflight] {SUMMARIES[0]}",
        f"[sparktui preflight] {SUMMARIES[1]}",
        f"[sparktui preflight] warning: {NODE_WARNING}",
        f"[sparktui preflight] warning: {open_ports_note(profile.cluster)}",
    ]
    assert launched.warnings == (NODE_WARNING, open_ports_note(profile.cluster))
    assert "listens on the head on every address" in launched.warnings[-1]


def test_the_profiles_environment_values_and_api_key_never_reach_the_panel(tmp_path):
    profile, done = a_cluster_launch(
        tmp_path, "node node1: ssh said: HF_TOKEN=hf_abcdef123456 rejected", "node node1: key sk-local-key refused"
    )
    profile = dataclasses.replace(
        profile,
        env={**profile.env, "HF_TOKEN": "hf_abcdef123456", "VLLM_LOGGING_LEVEL": "1"},
        serve=profile.serve.replace(api_key="sk-local-key"),
    )
    text = "\n".join(n.line() for n in cluster_launched(done, profile).notes)
    assert "hf_abcdef123456" not in text and "sk-local-key" not in text
    assert "HF_TOKEN=*** rejected" in text and "key *** refused" in text
    assert "node node1 (rank 1)" in text  # a one-character value ("1") is a setting: the lines stay whole


async def test_f5_on_a_cluster_profile_puts_each_nodes_preflight_atop_the_log_and_warns(tmp_path):
    profile_path = cluster_profile(tmp_path)

    class Cluster(RecordBackend):
        def runner_problem(self, profile):
            return None

        def launch(self, profile, force=False):
            _, done = a_cluster_launch(tmp_path, NODE_WARNING)
            self.record = done.state.model_dump(mode="json")
            return cluster_launched(done, profile)

    app = SparkApp(profile=profile_path, backend=Cluster())
    said = record_notices(app)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: config_pane(app).form.config is not None, "the profile")
        await pilot.press("f5")
        await until(pilot, lambda: app.server is not None and app.server.state == "ready", "the head, ready")
        await until(pilot, lambda: any("Application startup complete." in x for x in widget(app, LogView).lines()),
                    "the head's log")  # fmt: skip
        lines = widget(app, LogView).lines()
        assert lines[:4] == [f"[sparktui preflight] {s}" for s in SUMMARIES] + [
            f"[sparktui preflight] warning: {NODE_WARNING}",
            f"[sparktui preflight] warning: {open_ports_note(load_profile(profile_path).cluster)}",
        ]
        assert not lines[4].startswith("[sparktui")  # vLLM's own log follows
        notices = [n for n in said if n.title == "Preflight: 2 warnings"]
        assert len(notices) == 1 and notices[0].severity == "warning"
        assert NODE_WARNING in str(notices[0].message) and "on every address" in str(notices[0].message)


def test_a_workers_phase_in_the_server_list_reads_as_the_server_pane_names_it():
    from sparktui.runtime.records.protocol import condition_of

    node = NodeView(host="node1", rank=1, status="running", phase="kv_cache", available_gib=80.0)
    assert node_line(node, wide=True) == "    node node1 r1 running/KV cache  avail 80.0 GiB"
    assert node_line(node, wide=False) == "    node1 r1 KV cache 80.0G avail"
    record = StateRecord.model_validate(
        {"status": "starting", "phase": "kv_cache", "port": 8000, "supervisor": {"pid": 1, "start_time": 0},
         "guard": {"armed": True, "state": "watching", "lines": {}}}
    )  # fmt: skip
    entry = ServerEntry(port=8000, profile="two-sparks", condition=condition_of(record))
    assert entry.text() == "starting (KV cache)"

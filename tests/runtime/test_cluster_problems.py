"""What stops a cluster launch, from the nodes' reports: every problem names its node."""

from __future__ import annotations

from sparktui.runtime.cluster.link import NodeReport, problems


def report(host: str, **fields: object) -> NodeReport:
    base: dict[str, object] = {"sparktui": "0.1.0", "vllm_version": "0.32.0", "mem_available": 100 << 30}
    return NodeReport.from_json(host, {**base, **fields})


def test_alike_nodes_have_no_problem() -> None:
    assert problems([report("spark-a"), report("spark-b")]) == []


def test_each_problem_names_its_node() -> None:
    found = problems(
        [
            report("spark-a", ports_in_use=[8000]),
            NodeReport("spark-b", False, "not reachable over SSH: Connection refused"),
            report("spark-c", vllm_version=None, vllm_error="runner.executable = 'vllm' is not on PATH"),
        ]
    )
    assert found == [
        "node spark-a: port 8000 is in use; stop what holds it or choose another port",
        "node spark-b: not reachable over SSH: Connection refused",
        "node spark-c: runner.executable = 'vllm' is not on PATH",
    ]


def test_different_versions_name_which_node_has_which() -> None:
    found = problems([report("spark-a"), report("spark-b", vllm_version="0.31.1", sparktui="0.0.9")])
    assert "the nodes run different sparktui versions (spark-a has 0.1.0, spark-b has 0.0.9)" in found[0]
    assert "the nodes run different vLLM versions (spark-a has 0.32.0, spark-b has 0.31.1)" in found[1]

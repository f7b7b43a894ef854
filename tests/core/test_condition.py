"""One vocabulary for a server's condition, from the supervisor's record."""

from sparktui.core.condition import condition_of


def test_each_status_has_its_word():
    assert condition_of({"status": "starting", "phase": "loading_weights"}).text() == "starting (loading weights)"
    assert condition_of({"status": "starting", "phase": "launching"}).text() == "starting"
    assert condition_of({"status": "running"}).text() == "ready"
    assert condition_of({"status": "stopping"}).text() == "stopping"
    assert condition_of({"status": "lost"}).text() == "lost (its supervisor died)"


def test_how_it_ended():
    stopped = condition_of({"status": "exited", "exit": {"reason": "stopped", "returncode": 0}})
    assert stopped.word == "stopped" and stopped.text() == "stopped" and not stopped.live
    killed = condition_of({"status": "exited", "exit": {"reason": "killed", "returncode": None}})
    assert killed.text() == "stopped (killed)"
    assert "None" not in killed.exit_text()  # never "killed (exit None)"
    failed = condition_of(
        {
            "status": "exited",
            "phase": "failed",
            "exit": {"reason": "failed", "returncode": 1, "failure": {"kind": "kv_too_small"}},
        }
    )
    assert failed.text() == "failed (kv_too_small)" and failed.exit_text() == "failed (kv_too_small), exit status 1"
    guard = condition_of({"status": "exited", "exit": {"reason": "guard", "returncode": -15}, "trip": {"line": "term"}})
    assert guard.text() == "failed (guard)" and guard.exit_text().endswith("signal 15")
    crashed = condition_of({"status": "exited", "exit": {"reason": "exited", "returncode": 3}})
    assert crashed.word == "failed" and crashed.kind == "exit"
    swept = condition_of({"status": "exited", "exit": {"reason": "supervisor_died", "returncode": None}})
    assert swept.word == "lost"

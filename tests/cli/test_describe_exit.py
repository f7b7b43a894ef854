"""What `stop` and `kill` print for the record they end."""

from sparktui.commands.stop import describe_exit
from sparktui.core.guard_lines import GuardLines
from sparktui.runtime.records import protocol as pr


def _record(profile: str | None) -> pr.StateRecord:
    return pr.StateRecord(
        status="exited",
        port=8123,
        profile=profile,
        supervisor=pr.ProcessRef(pid=0),
        guard=pr.GuardRecord(armed=False, state="disarmed", lines=GuardLines(None, None, None)),
        exit=pr.ExitRecord(reason="stopped", stop=pr.StopRecord(gone=True, gone_after_s=0.5)),
    )


def test_a_record_with_its_profile_names_it() -> None:
    assert describe_exit(_record("qwen")) == "qwen on port 8123: exited (stopped, gone after 0.50 s)"


def test_a_recovered_record_without_a_profile_does_not_print_none() -> None:
    # a record from another version, recovered by stop --port, may hold no profile name
    assert describe_exit(_record(None)) == "server on port 8123: exited (stopped, gone after 0.50 s)"

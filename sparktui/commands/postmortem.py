"""What happened when the machine last went down while a server ran: the memory trajectory of
its last minute, the phase and last log lines, the kernel's NVRM/Xid/OOM lines of that boot, and
a verdict. Every sparktui command reports a new post-mortem once, on its first start after the
reboot; this shows the saved ones again."""

from __future__ import annotations

import argparse
import json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the post-mortems as JSON")
    parser.add_argument("--all", action="store_true", help="every saved post-mortem, not just the latest")


def run(args: argparse.Namespace) -> int:
    from sparktui.runtime import watch
    from sparktui.runtime.records import state as st

    watch.check_after_reboot(st.state_dir())  # a reboot nobody has looked at yet
    saved = watch.saved_postmortems(st.state_dir())
    if not args.all:
        saved = saved[:1]
    if args.json:
        print(json.dumps(saved, indent=1))
        return 0
    if not saved:
        print("no post-mortem: no boot has ended while a server ran under sparktui")
        return 0
    for i, d in enumerate(saved):
        if i:
            print()
        print(watch.postmortem_from_dict(d).render())
    return 0

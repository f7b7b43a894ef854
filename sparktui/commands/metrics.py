"""Serve what sparktui watches to Prometheus: MemAvailable and the pool, each server's reservation,
its guard (armed, lines, last sample age, trips), its wedge state, and the fit's predicted KV
tokens against vLLM's reported ones, labelled by port and profile.

  sparktui metrics --listen 127.0.0.1:9464     serve /metrics until Ctrl-C (or SIGTERM)
  sparktui metrics --once                      print one scrape and exit

A profile's `[metrics] listen = "127.0.0.1:9464"` makes its supervisor serve the same. A Grafana
dashboard for these families is in docs/grafana-sparktui.json.
"""

from __future__ import annotations

import argparse
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--listen", metavar="HOST:PORT", help="serve /metrics here, e.g. 127.0.0.1:9464")
    parser.add_argument("--once", action="store_true", help="print one scrape in Prometheus text and exit")


def run(args: argparse.Namespace) -> int:
    import signal
    import threading

    from sparktui.errors import UserError
    from sparktui.runtime import exporter

    if args.once:
        sys.stdout.write(exporter.render())
        return 0
    if not args.listen:
        raise UserError("give --listen HOST:PORT (e.g. 127.0.0.1:9464), or --once to print one scrape")
    server = exporter.serve(args.listen)
    host, port = server.server_address[:2]
    print(f"sparktui metrics on http://{args.listen}/metrics (listening on {host}:{port})", file=sys.stderr, flush=True)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    try:
        done.wait()
    finally:
        server.shutdown()
    return 0

"""Serves the golden two-GPU scenario on loopback for end-to-end tests.

Run from exporters/pytorch as `python3 -m tests.serve_fake`: it installs the
fake torch, starts the exporter on 127.0.0.1 with a free port, waits for the
first snapshot, prints `PORT <n>` on one line and serves until its standard
input closes (so it never outlives the test that started it).
"""

from __future__ import annotations

import sys

import gatekeeper_exporter

from . import scenario
from .fake_torch import Installed
from .helpers import WAIT


def main() -> int:
    with Installed(scenario.cuda()):
        exporter = gatekeeper_exporter.start(port=0, host="127.0.0.1", interval=3600)
        try:
            if not exporter.sampler.wait_first(WAIT):
                print("ERROR no first snapshot", flush=True)
                return 1
            print(f"PORT {exporter.port}", flush=True)
            sys.stdin.read()  # until the parent closes our stdin or exits
        finally:
            exporter.stop(WAIT)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Serves the golden two-GPU scenario on loopback for end-to-end tests.

Run from exporters/pytorch as `python3 -m tests.serve_fake`: it installs the
fake torch, starts the exporter on 127.0.0.1 with a free port, waits for the
first snapshot, prints `PORT <n>` on one line and serves until its standard
input closes (so it never outlives the test that started it).

`--empty-cache` turns on POST /v1/internal/empty_cache, `--token T` makes it
require `Authorization: Bearer T`, `--empty-cache-interval S` sets the
seconds between two calls (default 1).
"""

from __future__ import annotations

import argparse
import sys

import gatekeeper_exporter

from . import scenario
from .fake_torch import Installed
from .helpers import WAIT


def main(argv: list[str]) -> int:
    flags = argparse.ArgumentParser(prog="python3 -m tests.serve_fake")
    flags.add_argument("--empty-cache", action="store_true", help="serve POST /v1/internal/empty_cache")
    flags.add_argument("--token", default=None, help="the bearer token empty_cache requires")
    flags.add_argument("--empty-cache-interval", type=float, default=1.0, help="seconds between two calls")
    args = flags.parse_args(argv)
    with Installed(scenario.cuda()):
        exporter = gatekeeper_exporter.start(port=0, host="127.0.0.1", interval=3600, empty_cache=args.empty_cache,
                                             token=args.token, empty_cache_interval=args.empty_cache_interval)
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
    sys.exit(main(sys.argv[1:]))

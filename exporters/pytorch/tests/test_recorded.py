"""Real allocator data recorded on a GPU by scripts/gpu/check.sh, if any.

The GPU script writes fixtures (memory_stats, mem_get_info and a snapshot
taken at the same quiet moment) into $OUT/fixtures; copied into
testdata/recorded/ they are checked here on every CPU run.
"""

from __future__ import annotations

import glob
import json
import os
import unittest

from gatekeeper_exporter.figures import DeviceReading, compute_block, summarize

RECORDED = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "testdata", "recorded")


def fixtures() -> list[str]:
    """The fixture files: GATEKEEPER_RECORDED_DIR (the GPU script sets it) or testdata/recorded."""
    where = os.environ.get("GATEKEEPER_RECORDED_DIR") or RECORDED
    return sorted(glob.glob(os.path.join(where, "*.json")))


class RecordedTest(unittest.TestCase):
    def test_recorded_fixtures(self):
        files = fixtures()
        if not files:
            self.skipTest("no fixtures recorded on a GPU yet (scripts/gpu/check.sh writes them)")
        for path in files:
            with self.subTest(fixture=os.path.basename(path)):
                with open(path, encoding="utf-8") as f:
                    fx = json.load(f)
                check_fixture(self, fx)


def check_fixture(tc: unittest.TestCase, fx: dict) -> dict:
    """Checks one fixture's figures against torch's own; returns the computed block."""
    device = fx["device"]
    stats = fx["memory_stats"]
    free, total = fx["mem_get_info"]
    segs = fx["snapshot"]
    s = summarize(segs, device, 0.0)
    block = compute_block(DeviceReading(device=device, stats=stats, driver_free=free, driver_total=total,
                                        backend=fx.get("backend", "native")), s, 0.0)
    reserved, allocated = stats["reserved_bytes.all.current"], stats["allocated_bytes.all.current"]
    tc.assertEqual(block["reserved_bytes"], reserved)
    tc.assertEqual(block["used_bytes"], total - free)
    tc.assertLessEqual(block["largest_free_block_bytes"], block["free_bytes"])
    tc.assertEqual(block["free_bytes"], free + reserved - allocated - s.private_inactive_bytes)
    if not fx.get("trimmed"):
        # Taken at one quiet moment, the snapshot adds up to the statistics.
        mine = [x for x in segs if x.get("device", device) == device]
        tc.assertEqual(sum(x["total_size"] for x in mine), reserved)
        tc.assertEqual(sum(x["allocated_size"] for x in mine), allocated)
        if not s.expandable:  # an expandable segment is reported once per mapped range
            tc.assertEqual(len(mine), stats["segment.all.current"])
            split = sum(b["size"] for x in mine for b in x["blocks"]
                        if b["state"] == "inactive" and len(x["blocks"]) > 1)
            tc.assertEqual(split, stats["inactive_split_bytes.all.current"])
    want = fx.get("torch_view") or {}
    if "memory_reserved" in want:
        tc.assertEqual(reserved, want["memory_reserved"])
    return block


if __name__ == "__main__":
    unittest.main()

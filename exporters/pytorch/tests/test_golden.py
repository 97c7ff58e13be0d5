"""The golden file: the exact JSON the exporter serves for the fixed scenario.

gatekeeper's Go tests read the same file (internal/pressure/golden_test.go), so the
two sides cannot drift. Rewrite it with GATEKEEPER_UPDATE_GOLDEN=1.
"""

from __future__ import annotations

import json
import os
import unittest

from . import helpers, scenario
from .fake_torch import Installed

GOLDEN = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                      "testdata", "memory_blocks.golden.json")


def render(doc: dict) -> str:
    """The file's form of a served document: two-space indent, served key order."""
    return json.dumps(doc, indent=2) + "\n"


class GoldenTest(unittest.TestCase):
    def test_golden(self):
        cuda = scenario.cuda()
        clock = helpers.FakeClock(scenario.SNAPSHOT_AT)
        with Installed(cuda), helpers.clean_env():
            ex = helpers.start(self, cuda, clock=clock)
            clock.t = scenario.SERVED_AT
            status, ctype, body = helpers.get(ex.url)
        self.assertEqual((status, ctype), (200, "application/json"))
        served = json.loads(body)
        if os.environ.get("GATEKEEPER_UPDATE_GOLDEN") == "1":
            with open(GOLDEN, "w", encoding="utf-8") as f:
                f.write(render(served))
        with open(GOLDEN, encoding="utf-8") as f:
            text = f.read()
        self.assertEqual(json.loads(text), served, "the exporter's JSON changed: rerun with GATEKEEPER_UPDATE_GOLDEN=1 "
                                                   "and check internal/pressure/golden_test.go")
        self.assertEqual(text, render(served), "golden file not in its canonical form")
        # Key order as served, too (gatekeeper does not care; people reading it do).
        self.assertEqual(list(json.loads(text)["memory_blocks"][0]), list(served["memory_blocks"][0]))

    def test_scenario_reads_as_intended(self):
        with open(GOLDEN, encoding="utf-8") as f:
            blocks = json.load(f)["memory_blocks"]
        healthy, stranded = blocks
        # gatekeeper's ratio is free ÷ largest: healthy below 1.2, stranded above 1.5.
        self.assertLess(healthy["free_bytes"] / healthy["largest_free_block_bytes"], 1.2)
        self.assertGreater(stranded["free_bytes"] / stranded["largest_free_block_bytes"], 1.5)


if __name__ == "__main__":
    unittest.main()

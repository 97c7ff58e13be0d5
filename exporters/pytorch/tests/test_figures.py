"""The arithmetic, on recorded-shape snapshots and statistics (no torch)."""

from __future__ import annotations

import unittest

from gatekeeper_exporter.figures import (
    LARGE_GRANULE, SMALL_GRANULE, DeviceReading, change_key, compute_block, is_private_pool,
    segments_of, summarize, whole_granules,
)
from gatekeeper_exporter.reader import expandable_from_conf

from . import scenario
from .fake_torch import GIB, MIB, block, segment, stats_from

ALLOCATOR_FIELDS = ("largest_free_block_bytes", "block_count", "fragmentation_ratio", "alloc_retry_count",
                    "inactive_split_bytes", "num_ooms", "segment_count", "private_pool_free_bytes",
                    "snapshot_age_seconds", "expandable_segments")


def figures(segments, device=0, free=8 * GIB, total=80 * GIB, *, summary=True, backend="native",
            fraction=None, expandable_setting=None, retries=0, stats=None, now=10.0):
    s = summarize(segments, device, 9.0) if summary else None
    r = DeviceReading(device=device, stats=stats if stats is not None else stats_from(segments, device, retries=retries),
                      driver_free=free, driver_total=total, backend=backend, memory_fraction=fraction,
                      expandable_setting=expandable_setting)
    return compute_block(r, s, now)


class ScenarioTest(unittest.TestCase):
    def test_healthy_gpu(self):
        b = figures(scenario.gpu0(), 0, free=8 * GIB)
        # cached free = 2 GiB + 1.5 GiB (whole segments) + 512 MiB (split) + 1 MiB (small split)
        # + 600 MiB in the CUDA-graph pool, which is left out.
        self.assertEqual(b["free_bytes"], 8 * GIB + 3584 * MIB + 513 * MIB)
        self.assertEqual(b["largest_free_block_bytes"], 8 * GIB + 3584 * MIB)
        self.assertEqual(b["private_pool_free_bytes"], 600 * MIB)
        self.assertEqual(b["block_count"], 4)
        self.assertAlmostEqual(b["fragmentation_ratio"], (11.5 * 1024) / (11.5 * 1024 + 513), places=6)
        self.assertEqual(b["used_bytes"], 72 * GIB)

    def test_stranded_gpu(self):
        b = figures(scenario.gpu1(), 1, free=2 * GIB, retries=3)
        self.assertEqual(b["free_bytes"], 2 * GIB + 512 * MIB + 8 * 640 * MIB)
        self.assertEqual(b["largest_free_block_bytes"], 2 * GIB + 512 * MIB)
        self.assertEqual(b["fragmentation_ratio"], 0.333333)
        self.assertEqual(b["alloc_retry_count"], 3)
        self.assertEqual(b["inactive_split_bytes"], 5 * GIB)
        self.assertEqual(b["segment_count"], 10)


class DefinitionTest(unittest.TestCase):
    def test_cases(self):
        cases = [
            # name, segments, driver free, want free, want largest
            ("nothing cached", [], 10 * GIB, 10 * GIB, 10 * GIB),
            ("a wholly free segment joins the driver's free",
             [segment(0, 0, [block(2 * GIB)])], 1 * GIB, 3 * GIB, 3 * GIB),
            ("a free block in a split segment is stranded",
             [segment(0, 0, [block(1 * GIB, "active_allocated"), block(3 * GIB)])], 1 * GIB, 4 * GIB, 3 * GIB),
            ("a big hole beats a small driver free",
             [segment(0, 0, [block(1 * GIB, "active_allocated"), block(3 * GIB)]),
              segment(0, 1 << 40, [block(512 * MIB)])], 256 * MIB, 3840 * MIB, 3 * GIB),
            # The snapshot sees a segment that a flush (which first waits for
            # the pending frees) returns whole, but memory_stats still count
            # its free half as split: the statistics win, conservatively.
            ("a pending-free block is cached free but its neighbour stays split",
             [segment(0, 0, [block(1 * GIB, "active_pending_free"), block(1 * GIB)])], 0, 2 * GIB, 1 * GIB),
            ("nothing free at all", [segment(0, 0, [block(1 * GIB, "active_allocated")])], 0, 0, 0),
        ]
        for name, segs, free, want_free, want_largest in cases:
            with self.subTest(name):
                b = figures(segs, free=free)
                self.assertEqual(b["free_bytes"], want_free)
                self.assertEqual(b["largest_free_block_bytes"], min(want_largest, want_free))
                self.assertLessEqual(b["fragmentation_ratio"], 1.0)
                if want_free == 0:
                    self.assertEqual(b["fragmentation_ratio"], 1.0)

    def test_pending_free_counts_as_allocated_in_stats_only(self):
        # memory_stats drops a pending-free block from allocated_bytes at once,
        # so it is cached free; the snapshot's allocated_size is 0 as well.
        segs = [segment(0, 0, [block(1 * GIB, "active_pending_free"), block(1 * GIB)])]
        self.assertEqual(segs[0]["allocated_size"], 0)
        self.assertEqual(summarize(segs, 0, 0).reclaimable_bytes, 2 * GIB)

    def test_private_pools_left_out(self):
        segs = [
            segment(0, 0, [block(1 * GIB, "active_allocated"), block(1 * GIB)]),
            segment(0, 1 << 40, [block(5 * GIB)], pool=(3, 1)),  # a graph pool's wholly free segment
            segment(0, 2 << 40, [block(1 * GIB, "active_allocated"), block(4 * GIB)], pool=[0, 7]),
        ]
        s = summarize(segs, 0, 0)
        self.assertEqual(s.largest_inactive_block, 1 * GIB)
        self.assertEqual(s.reclaimable_bytes, 0)
        self.assertEqual(s.private_inactive_bytes, 9 * GIB)
        self.assertEqual(s.private_segment_count, 2)
        self.assertEqual(s.segment_count, 1)
        b = figures(segs, free=1 * GIB)
        self.assertEqual(b["free_bytes"], 2 * GIB)  # the private pools' 9 GiB are not free for us
        self.assertEqual(b["largest_free_block_bytes"], 1 * GIB)

    def test_pool_ids(self):
        for pool, want in [((0, 0), False), ([0, 0], False), (None, False), (0, False), ("0_0", False),
                           ((1, 0), True), ([0, 3], True), (1, True), ("2_1", True), ("(0, 4)", True)]:
            with self.subTest(pool=pool):
                self.assertEqual(is_private_pool(pool), want)

    def test_snapshot_shapes(self):
        segs = scenario.gpu0()
        self.assertEqual(segments_of(segs), segs)
        self.assertEqual(segments_of({"segments": segs, "device_traces": []}), segs)
        self.assertEqual(segments_of(None), [])
        self.assertEqual(segments_of({"device_traces": []}), [])

    def test_other_devices_ignored(self):
        segs = scenario.gpu0() + scenario.gpu1()
        self.assertEqual(summarize(segs, 0, 0), summarize(scenario.gpu0(), 0, 0))

    def test_missing_allocated_size_is_computed(self):
        seg = segment(0, 0, [block(1 * GIB)])
        del seg["allocated_size"]
        self.assertEqual(summarize([seg], 0, 0).reclaimable_bytes, 1 * GIB)
        seg = segment(0, 0, [block(1 * GIB, "active_allocated"), block(1 * GIB)])
        del seg["allocated_size"]
        self.assertEqual(summarize([seg], 0, 0).reclaimable_bytes, 0)

    def test_blocks_without_addresses(self):
        seg = segment(0, 40 * MIB, [block(10 * MIB, "active_allocated"), block(50 * MIB)], expandable=True)
        for b in seg["blocks"]:
            del b["address"]
        # the free block spans [50, 100) MiB: whole 20 MiB granules [60, 100)
        self.assertEqual(summarize([seg], 0, 0).reclaimable_bytes, 40 * MIB)


class ExpandableTest(unittest.TestCase):
    def test_whole_granules(self):
        g = LARGE_GRANULE
        self.assertEqual(whole_granules(0, 3 * g, g), 3 * g)
        self.assertEqual(whole_granules(1, 3 * g, g), 2 * g)
        self.assertEqual(whole_granules(g - 1, 2, g), 0)
        self.assertEqual(whole_granules(5 * MIB, 17 * MIB, SMALL_GRANULE), 16 * MIB)

    def test_free_blocks_give_back_whole_granules(self):
        # One expandable segment (a mapped range): holes between live tensors.
        # A flush unmaps the whole 20 MiB granules inside each hole, so they
        # join the driver's free; only the slivers stay stranded.
        g = LARGE_GRANULE
        seg = segment(0, 0, [
            block(30 * MIB, "active_allocated"),
            block(100 * MIB),  # [30, 130): granules [40, 120) = 80 MiB
            block(10 * MIB, "active_allocated"),
            block(60 * MIB),  # [140, 200): granules [140, 200) = 60 MiB
        ], expandable=True)
        s = summarize([seg], 0, 0)
        self.assertTrue(s.expandable)
        self.assertEqual(s.reclaimable_bytes, 140 * MIB)
        self.assertEqual(s.largest_inactive_block, 100 * MIB)
        stats = stats_from([seg], 0)
        self.assertEqual(stats["inactive_split_bytes.all.current"], 160 * MIB)  # every expandable block is split
        b = figures([seg], free=1 * GIB)
        self.assertEqual(b["free_bytes"], 1 * GIB + 160 * MIB)
        self.assertEqual(b["largest_free_block_bytes"], 1 * GIB + 140 * MIB)
        self.assertTrue(b["expandable_segments"])
        self.assertEqual(g, 20 * MIB)

    def test_small_pool_granule(self):
        seg = segment(0, 0, [block(1 * MIB, "active_allocated"), block(5 * MIB)], expandable=True, kind="small")
        self.assertEqual(summarize([seg], 0, 0).reclaimable_bytes, 4 * MIB)  # [1, 6): granules [2, 6)

    def test_setting_reported_before_any_segment(self):
        b = figures([], expandable_setting=True)
        self.assertTrue(b["expandable_segments"])
        b = figures([], expandable_setting=None, summary=False)
        self.assertNotIn("expandable_segments", b)

    def test_conf_parsing(self):
        cases = [
            ({}, None),
            ({"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}, True),
            ({"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:128, expandable_segments:False"}, False),
            ({"PYTORCH_ALLOC_CONF": "expandable_segments:true", "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:False"}, True),
            ({"PYTORCH_ALLOC_CONF": "backend:native"}, None),
            ({"PYTORCH_ALLOC_CONF": "backend:native", "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}, True),
        ]
        for env, want in cases:
            with self.subTest(env=env):
                self.assertEqual(expandable_from_conf(env), want)


class AbsenceTest(unittest.TestCase):
    def test_before_first_snapshot(self):
        b = figures(scenario.gpu1(), 1, free=2 * GIB, summary=False)
        for field in ("largest_free_block_bytes", "fragmentation_ratio", "block_count", "snapshot_age_seconds",
                      "private_pool_free_bytes", "expandable_segments"):
            self.assertNotIn(field, b)
        self.assertEqual(b["free_bytes"], 2 * GIB + 512 * MIB + 5 * GIB)
        self.assertIn("alloc_retry_count", b)

    def test_cuda_malloc_async(self):
        segs = scenario.gpu0()
        b = figures(segs, backend="cudaMallocAsync", expandable_setting=True)
        for field in ALLOCATOR_FIELDS:
            self.assertNotIn(field, b, field)
        for field in ("gpu_id", "total_bytes", "used_bytes", "free_bytes", "reserved_bytes", "allocated_bytes"):
            self.assertIn(field, b, field)
        self.assertEqual(b["allocator_backend"], "cudaMallocAsync")

    def test_failed_reads(self):
        r = DeviceReading(device=2, stats=None, driver_free=None, driver_total=None, backend="native",
                          errors=("memory_stats: boom", "mem_get_info: bang"))
        b = compute_block(r, None, 0)
        self.assertEqual(b, {"gpu_id": "2", "allocator_backend": "native",
                             "error": "memory_stats: boom; mem_get_info: bang"})

    def test_empty_stats(self):
        r = DeviceReading(device=0, stats={}, driver_free=GIB, driver_total=2 * GIB)
        b = compute_block(r, None, 0)
        self.assertEqual(b["used_bytes"], GIB)
        self.assertNotIn("free_bytes", b)
        self.assertIn("memory_stats is empty", b["error"])

    def test_snapshot_error_reported(self):
        segs = scenario.gpu0()
        r = DeviceReading(device=0, stats=stats_from(segs, 0), driver_free=GIB, driver_total=80 * GIB)
        b = compute_block(r, summarize(segs, 0, 1.0), 3.5, "memory_snapshot: boom")
        self.assertEqual(b["error"], "memory_snapshot: boom")
        self.assertEqual(b["snapshot_age_seconds"], 2.5)


class StalenessTest(unittest.TestCase):
    def test_todays_stats_bound_an_old_snapshot(self):
        # The snapshot saw a wholly free 2 GiB segment; since then a tensor
        # took all of it (no split, no new segment: no new snapshot yet).
        old = [segment(0, 0, [block(2 * GIB)]), segment(0, 1 << 40, [block(1 * GIB, "active_allocated"), block(1 * GIB)])]
        now = [segment(0, 0, [block(2 * GIB, "active_allocated")]), old[1]]
        s = summarize(old, 0, 0)
        r = DeviceReading(device=0, stats=stats_from(now, 0), driver_free=GIB, driver_total=80 * GIB)
        b = compute_block(r, s, 1.0)
        self.assertEqual(b["free_bytes"], 2 * GIB)
        self.assertEqual(b["largest_free_block_bytes"], 1 * GIB)  # not 3 GiB
        self.assertEqual(change_key(stats_from(old, 0)), change_key(stats_from(now, 0)))

    def test_memory_fraction_caps_driver_free(self):
        segs = [segment(0, 0, [block(6 * GIB, "active_allocated"), block(2 * GIB)])]
        # 10 GiB allowed, 8 GiB reserved: 2 GiB more may be reserved, whatever the driver has.
        b = figures(segs, free=50 * GIB, total=100 * GIB, fraction=0.1)
        self.assertEqual(b["free_bytes"], 4 * GIB)
        self.assertEqual(b["largest_free_block_bytes"], 2 * GIB)
        self.assertEqual(b["memory_fraction"], 0.1)
        self.assertEqual(b["used_bytes"], 50 * GIB)
        self.assertNotIn("memory_fraction", figures(segs, fraction=1.0))

    def test_change_key(self):
        self.assertIsNone(change_key({}))
        self.assertIsNone(change_key(None))
        st = stats_from(scenario.gpu1(), 1)
        self.assertEqual(change_key(st), (5 * GIB, 10))


if __name__ == "__main__":
    unittest.main()

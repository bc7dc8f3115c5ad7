"""The local sampler's bounded history and the idle detection over it and over Prometheus ranges."""

from __future__ import annotations

from cube_jupyter.gpu.history import IdleTracker, SampleHistory, trailing_idle_seconds


def test_history_keeps_only_recent_points_per_series() -> None:
    history = SampleHistory(max_age_seconds=10, sample_seconds=1)
    for t in range(100):
        history.add("gpu:A", "utilization_pct", float(t), float(t % 7))
        history.add("gpu:A", "memory_used_mib", float(t), 1000.0 + t)
    # Bounded by age: 100 samples a second apart, 10 s kept (both ends inclusive).
    assert len(history) == 2 * 11
    (memory, util) = history.series(None, seconds=600, now=99.0)
    assert memory.metric == "memory_used_mib" and util.metric == "utilization_pct"
    assert [t for t, _ in util.points] == [float(t) for t in range(89, 100)]
    assert util.points[-1] == (99.0, float(99 % 7))
    # A shorter window than kept, and only the keys asked for.
    (recent,) = history.series(["gpu:A"], seconds=3, now=99.0)[1:]
    assert [t for t, _ in recent.points] == [96.0, 97.0, 98.0, 99.0]
    assert history.series(["gpu:B"], seconds=600, now=99.0) == []


def test_history_is_bounded_by_count_when_samples_come_fast() -> None:
    history = SampleHistory(max_age_seconds=10, sample_seconds=1)
    for i in range(10_000):
        history.add("kernel:k", "memory_used_mib", 50.0 + i / 10_000, 1.0)
    assert len(history) == history.max_points == 2 * 10 + 2


def test_unreported_values_are_skipped_not_zero() -> None:
    history = SampleHistory(max_age_seconds=10, sample_seconds=1)
    history.add("gpu:A", "utilization_pct", 1.0, None)
    history.add("gpu:A", "utilization_pct", 2.0, 5.0)
    (series,) = history.series(None, 10, now=2.0)
    assert series.points == ((2.0, 5.0),)


def test_forget_drops_series_of_ended_kernels_once_they_age_out() -> None:
    history = SampleHistory(max_age_seconds=10, sample_seconds=1)
    history.add("kernel:gone", "memory_used_mib", 0.0, 10.0)
    history.add("gpu:A", "utilization_pct", 0.0, 10.0)
    history.forget(["gpu:A"], now=5.0)
    assert {s.key for s in history.series(None, 100, now=5.0)} == {"kernel:gone", "gpu:A"}
    history.forget(["gpu:A"], now=20.0)
    assert history.series(None, 100, now=20.0) == []
    history.add("gpu:A", "utilization_pct", 21.0, 1.0)
    assert [s.key for s in history.series(None, 100, now=21.0)] == ["gpu:A"]


def test_idle_spell_needs_memory_held_at_zero_utilization() -> None:
    idle = IdleTracker()
    idle.observe("kernel:k", "GPU-A", 0.0, memory_used_mib=2048, utilization=37)
    assert idle.idle_seconds("kernel:k", now=100.0) == 0
    idle.observe("kernel:k", "GPU-A", 10.0, memory_used_mib=2048, utilization=0)
    idle.observe("kernel:k", "GPU-A", 20.0, memory_used_mib=2048, utilization=None)  # unknown: no change
    idle.observe("kernel:k", "GPU-A", 30.0, memory_used_mib=2048, utilization=0)
    assert idle.idle_seconds("kernel:k", now=40.0) == 30.0
    spell = idle.spell("kernel:k")
    assert spell is not None and spell.gpu == "GPU-A" and spell.since == 10.0
    idle.observe("kernel:k", "GPU-A", 50.0, memory_used_mib=2048, utilization=1)  # busy again
    assert idle.idle_seconds("kernel:k", now=60.0) == 0
    idle.observe("kernel:k", "GPU-A", 70.0, memory_used_mib=0, utilization=0)  # released its memory
    assert idle.spell("kernel:k") is None
    idle.observe("kernel:j", "GPU-A", 80.0, memory_used_mib=10, utilization=0)
    idle.forget(["kernel:k"])
    assert idle.spell("kernel:j") is None


def test_trailing_idle_from_a_query_range() -> None:
    times = [float(t) for t in range(0, 100, 10)]
    util = [(t, 50.0 if t < 40 else 0.0) for t in times]
    memory = [(t, 512.0) for t in times]
    assert trailing_idle_seconds(util, memory, 10.0) == 50.0  # idle from t=40 to the newest point, t=90
    assert trailing_idle_seconds(util, [(t, 0.0) for t in times], 10.0) == 0.0  # nothing held: not idle
    busy_now = [*util[:-1], (90.0, 3.0)]
    assert trailing_idle_seconds(busy_now, memory, 10.0) == 0.0
    assert trailing_idle_seconds([], [], 10.0) == 0.0
    # A pod of the same name idle before a gap (gone, then back: a job resubmitted) is a new spell.
    before, after = [0.0, 10.0, 20.0], [620.0, 630.0]
    gapped = [(t, 0.0) for t in before + after]
    held = [(t, 512.0) for t in before + after]
    assert trailing_idle_seconds(gapped, held, 10.0) == 10.0
    assert trailing_idle_seconds(gapped, held, 1000.0) == 630.0  # within 1.5 steps: one spell

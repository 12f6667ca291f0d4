"""bench/autoscale.py: the replica model against queueing theory, and the autoscaler's behaviour on a ramp."""

from __future__ import annotations

import json
import statistics

import pytest

from bench import autoscale

# one replica as bench/load.py measured it (sentences/s by requests in flight): rising with the batch, then flat
LEVELS = [(1, 100.0), (8, 230.0), (32, 300.0), (64, 300.0)]


def test_capacity_reads_load_py_output_and_interpolates_between_its_levels(tmp_path):
    out = tmp_path / "load.txt"
    levels = [{"concurrency": c, "sent_s": x, "p99_ms": 1.0} for c, x in LEVELS]
    out.write_text("concurrency   1: ...\n" + json.dumps({"levels": levels}) + "\n")
    x = autoscale.Capacity(autoscale.read_capacity(str(out)))
    assert x(1) == 100.0 and x(8) == 230.0 and x(20) == pytest.approx(265.0) and x(500) == 300.0
    assert x(0) == 0.0
    (tmp_path / "empty.txt").write_text("no summary\n")
    with pytest.raises(SystemExit, match="no JSON summary"):
        autoscale.read_capacity(str(tmp_path / "empty.txt"))


def steady(rps: float, levels, seconds: float = 400.0, replicas: int = 1, **options) -> list[dict]:
    opt = autoscale.Options(base_rps=rps, ramp_factor=1.0, ramp_start_s=0.0, ramp_s=1.0, hold_s=seconds,
                            min_replicas=replicas, max_replicas=replicas, **options)  # fmt: skip
    x = autoscale.Capacity(levels)
    return autoscale.simulate(opt, x, x, [1.0])


def test_a_replica_of_constant_speed_is_the_processor_sharing_queue_of_theory():
    # M/D/1-PS: the mean time in the system is 1 / (c - lambda) whatever the sizes' distribution
    rows = steady(50.0, [(1, 100.0)], seconds=600.0)[5:]
    mean = statistics.fmean(r["mean_ms"] for r in rows)
    assert mean == pytest.approx(1000 / (100 - 50), rel=0.1)
    assert sum(r["rejected"] for r in rows) == 0


def test_an_overloaded_replica_answers_at_its_capacity_and_refuses_the_rest_with_429():
    rows = steady(450.0, LEVELS, seconds=120.0, max_queue=256)[-6:]
    assert statistics.fmean(r["done_rps"] for r in rows) == pytest.approx(300.0, rel=0.05)
    assert all(r["rejected"] > 0 for r in rows) and all(r["in_flight_per_pod"] >= 250 for r in rows)


def ramp(**options) -> list[dict]:
    """100 -> 1,000 requests/s and back, on replicas of LEVELS, all five times slower (requests 5x longer): the same
    dynamics (latencies x 5) for a fifth of the events to simulate."""
    opt = autoscale.Options(base_rps=20.0, ramp_factor=10.0, ramp_start_s=120.0, ramp_s=300.0, hold_s=600.0,
                            fall_s=300.0, tail_s=400.0, **options)  # fmt: skip
    x = autoscale.Capacity([(c, r / 5) for c, r in LEVELS])
    return autoscale.simulate(opt, x, x, [0.5, 1.0, 1.5])


def test_the_autoscaler_follows_a_ramp_up_and_down_with_targets_at_70_percent_of_capacity():
    rows = ramp(target=7.0, rate_target=0.7 * 300.0 / 5)  # LEVELS: 70% of capacity at about 7 in flight
    top = [r for r in rows if 120 + 300 + 60 < r["t"] <= 120 + 300 + 600]
    # 1,000 requests/s at 210 a replica: 5 replicas at least, and no request refused on the way
    assert min(r["desired"] for r in top) >= 5 and sum(r["rejected"] for r in rows) == 0
    assert max(r["p99_ms"] for r in rows) < 5 * 300
    assert rows[-1]["desired"] == 2, "back to minReplicas once the traffic is back down"
    assert all(r["desired"] >= b["desired"] - 1 for r, b in zip(rows[1:], rows) if r["t"] > 1020), "one at a time"


def test_an_in_flight_target_near_saturation_acts_too_late():
    at_70, at_92 = ramp(target=7.0), ramp(target=24.0)  # 300 * 0.92 = 277 sentences/s at 24 in flight
    assert max(r["p99_ms"] for r in at_92) > 2 * max(r["p99_ms"] for r in at_70)


def test_a_new_pod_takes_start_s_to_become_ready():
    opt = autoscale.Options(base_rps=150.0, ramp_factor=4.0, ramp_start_s=30.0, ramp_s=60.0, hold_s=200.0,
                            target=24.0, rate_target=200.0, start_s=15.0, window_s=5.0)  # fmt: skip
    x = autoscale.Capacity(LEVELS)
    rows = autoscale.simulate(opt, x, x, [1.0])
    grew = next(i for i, r in enumerate(rows) if r["desired"] > 2)
    assert rows[grew]["ready"] == 2, "asked for, not ready yet"
    ready = next(i for i, r in enumerate(rows) if r["ready"] > 2)
    assert 15.0 <= rows[ready]["t"] - rows[grew]["t"] + opt.window_s and rows[ready]["t"] - rows[grew]["t"] <= 20.0


def test_a_pod_decodes_at_eager_speed_until_its_graphs_are_compiled():
    fast, slow = autoscale.Capacity([(1, 100.0)]), autoscale.Capacity([(1, 50.0)])
    pod = autoscale.Replica(ready_at=0.0, compiled_at=10.0)
    pod.flight.append((1000.0, 1))  # one request of 1,000 units of work
    assert pod.next_finish(0.0, fast, slow) == 10.0, "the speed changes at 10 s: an event there"
    pod.advance(20.0, fast, slow)
    assert pod.v == pytest.approx(10 * 50.0 + 10 * 100.0)
    assert pod.next_finish(20.0, fast, slow) == 20.0  # done: 1,500 units of work given to it

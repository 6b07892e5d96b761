"""bench/soak_report.py's verdict on synthetic series: a leak fails it, a flat run passes, warm-up is left out."""

from __future__ import annotations

from bench.reliability_harness import passed
from bench.soak_mix import KINDS
from bench.soak_report import verdict


def samples(rss: list[float], fds: list[int], kinds=KINDS) -> list[dict]:
    return [
        {
            "interval": i + 1,
            "end_s": 60.0 * (i + 1),
            "rss_mb": r,
            "fds": f,
            "threads": 14,
            "settled": True,
            "queue_depth_max": 3,
            "in_flight_max": 8,
            "requests": {kind: {"200": 50} for kind in kinds},
            "p99_ms": {"translate greedy": 80.0},
            "unexpected": 0,
        }
        for i, (r, f) in enumerate(zip(rss, fds, strict=True))
    ]


FLAT_RSS = [181.0, 184.5, 183.9, 185.2, 184.7, 186.0]  # noise of a few MiB around a level
FLAT_FDS = [37, 37, 38, 37, 37, 37]


def failed(checks: list[str]) -> list[str]:
    return [check for check in checks if check.startswith("FAIL")]


def test_a_flat_run_passes():
    checks = verdict(samples(FLAT_RSS, FLAT_FDS), unexpected=0)
    assert passed(checks), checks
    assert any("RSS 181 after warm-up, 186 at the end (+2.8%" in check for check in checks), checks


def test_a_memory_leak_fails():
    leaking = [181.0 + 6 * i for i in range(6)]  # +6 MiB a minute: +16.6% after the first minute
    checks = verdict(samples(leaking, FLAT_FDS), unexpected=0)
    assert [c.split(" ")[1] for c in failed(checks)] == ["RSS"], checks


def test_a_descriptor_leak_fails():
    leaking = [37 + 2 * i for i in range(6)]  # two sockets never closed a minute
    checks = verdict(samples(FLAT_RSS, leaking), unexpected=0)
    assert len(failed(checks)) == 1 and "open file descriptors 37 after warm-up, 47 at the end" in failed(checks)[0]


def test_growth_during_warm_up_is_not_counted():
    rising_then_flat = [120.0, 180.0, 182.0, 181.0, 183.0, 182.0]  # arenas and caches filling in the first minutes
    assert not passed(verdict(samples(rising_then_flat, FLAT_FDS), unexpected=0, warmup=1))
    assert passed(verdict(samples(rising_then_flat, FLAT_FDS), unexpected=0, warmup=2))


def test_unexpected_answers_a_kind_never_sent_or_too_few_samples_fail():
    assert failed(verdict(samples(FLAT_RSS, FLAT_FDS), unexpected=1)) == ["FAIL: 1 unexpected answers"]
    no_streams = [kind for kind in KINDS if kind != "stream"]
    assert "stream never" in " ".join(failed(verdict(samples(FLAT_RSS, FLAT_FDS, no_streams), unexpected=0)))
    assert not passed(verdict(samples(FLAT_RSS[:1], FLAT_FDS[:1]), unexpected=0))


def test_a_request_left_in_flight_after_an_interval_fails():
    stuck = samples(FLAT_RSS, FLAT_FDS)
    stuck[3]["settled"] = False  # the server still had work 20 s after the clients stopped
    assert [c.split(":")[0] for c in failed(verdict(stuck, unexpected=0))] == ["FAIL"]
    assert "not after intervals [4]" in failed(verdict(stuck, unexpected=0))[0]

"""bench/slow_clients.py's verdict: it fails on a slow or failed probe, a dead server, or attackers left open."""

from __future__ import annotations

from bench.slow_clients import AttackResult, Probe, parse_args, verdict


def run(probes, results, alive=True, expect_close="10"):
    args = parse_args(["--max-probe-s", "1", "--expect-close-s", expect_close])
    return verdict(args, results, probes, {"alive": alive, "fds_max": 0})


def closed_all(n=4, after=3.0):
    return [AttackResult(opened=n, close_after_s=[after] * n)]


def test_passes_when_every_probe_is_fast_and_every_attacker_closed():
    probes = [Probe(0.0, "/healthz", 200, 0.05), Probe(0.1, "/v1/translate", 200, 0.3)]
    assert all(c.startswith("ok") for c in run(probes, closed_all()))


def test_fails_on_a_slow_probe_an_error_or_a_dead_server():
    fast = Probe(0.0, "/healthz", 200, 0.05)
    assert not run([fast, Probe(0.1, "/v1/translate", 200, 1.5)], closed_all())[0].startswith("ok")
    assert not run([fast, Probe(0.1, "/healthz", "ConnectionResetError", 0.0)], closed_all())[0].startswith("ok")
    assert not run([fast], closed_all(), alive=False)[1].startswith("ok")


def test_fails_when_attackers_stay_open_or_close_late():
    fast = [Probe(0.0, "/healthz", 200, 0.05)]
    left_open = [AttackResult(opened=4, close_after_s=[3.0] * 3, still_open=1)]
    assert not run(fast, left_open)[2].startswith("ok")
    assert not run(fast, closed_all(after=12.0))[2].startswith("ok")

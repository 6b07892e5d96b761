"""The soak, CI-sized (bench/soak.py runs an hour on de-en): a minute of mixed load on the tiny bundle grows neither
memory nor descriptors and gets only the expected answers; the same soak fails on a server made to leak."""

from __future__ import annotations

import json

from leak_injection import COMMAND as LEAKING_COMMAND
from matplotlib.image import imread
from reliability_helpers import start_server

from bench import soak
from bench.soak_report import totals


def test_a_minute_of_mixed_load_grows_nothing_and_gets_only_expected_answers(tiny_repository, tmp_path):
    argv = ["--repository", str(tiny_repository), "--duration", "60", "--interval", "10", "--clients", "4"]
    code = soak.main([*argv, "--output-dir", str(tmp_path), "--no-write"])

    record = json.loads((tmp_path / "soak.json").read_text())
    # the verdict: RSS and descriptors +10% at most from the end of the first interval to the end, every kind
    # sent, nothing left in flight after an interval, 0 unexpected answers
    assert code == 0, (record["checks"], record["unexpected"][:5])
    samples = record["samples"]
    assert [s["interval"] for s in samples] == [1, 2, 3, 4, 5, 6]
    counts = totals(samples)
    assert set(counts["bad input"]) <= {"404", "405", "422"} and sum(counts["bad input"].values()) > 5
    assert counts["disconnect mid-request"].get("closed"), "no client left mid-request: the soak tested nothing"
    assert set(counts["stream"]) == {"200"} and set(counts["translate beam"]) == {"200"}
    assert record["server_counters"]["requests_in_flight"] == 0
    assert imread(tmp_path / "soak.png").shape[:2] == (650, 1000)
    assert "| minute | RSS MiB | fds |" in (tmp_path / "soak.md").read_text()


def test_the_soak_fails_on_a_server_that_leaks(tiny_repository, tmp_path):
    """tests/leak_injection.py: one descriptor and 1 MiB kept per engine batch."""
    server = start_server(tiny_repository, {}, tmp_path / "service.log", command=LEAKING_COMMAND)
    try:
        argv = ["--url", server.url, "--pid", str(server.process.pid), "--duration", "12", "--interval", "4"]
        code = soak.main([*argv, "--clients", "4", "--output-dir", str(tmp_path / "soak"), "--no-write"])
    finally:
        server.stop()

    record = json.loads((tmp_path / "soak" / "soak.json").read_text())
    failed = [check for check in record["checks"] if check.startswith("FAIL")]
    assert code == 1
    assert [check.split(" ")[1] for check in failed] == ["RSS", "open"], record["checks"]
    assert record["unexpected_total"] == 0

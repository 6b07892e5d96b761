"""The recorded requests (recorded.py) answer byte for byte as recorded (answers.json, recorded on the tree before
the structure round of issue 58 by record.py) in every server set-up: the /v1 API, DeepL, LibreTranslate, the Open
Inference Protocol v2, glossaries and documents, against the shipped models. Only ids, times and durations are
normalized (replay_harness.VARYING); everything else, scores and attention weights included, must be equal."""

from __future__ import annotations

import pytest
from live_server import LiveServer
from recorded import REQUESTS
from replay_harness import MODEL_REPOSITORY, SETUPS, load_answers, machine, replay, server_env


@pytest.mark.parametrize("setup", sorted(SETUPS))
def test_recorded_requests_answer_as_recorded(setup, tmp_path):
    answers = load_answers()
    if answers["machine"] != machine():
        pytest.skip(
            f"recorded on a CPU with {answers['machine']}, this one has {machine()}: its kernels round "
            "differently (record the tree before a change on this machine: tests/replay/record.py)"
        )
    recorded = answers[setup]
    env = server_env(setup, tmp_path)
    if env is None:
        pytest.skip(f"{setup}: this machine cannot build or run the fused step's VNNI kernels")
    with LiveServer(MODEL_REPOSITORY, env=env, log_path=tmp_path / "service.log").start(timeout=240) as server:
        answers = replay(server.url, REQUESTS)
    assert sorted(answers) == sorted(recorded)
    differing = [name for name in recorded if answers[name] != recorded[name]]
    assert not differing, {name: (recorded[name], answers[name]) for name in differing[:3]}

"""Record answers.json: every set-up's server started on the shipped model_repository, the requests replayed twice
on two fresh servers; a request whose two answers differ is an error (its answer is not reproducible: exclude it or
normalize the field, with the reason in recorded.py or replay_harness.VARYING).

    python tests/replay/record.py [SETUP ...]      (from the repository root; the fused set-up builds the library)
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from live_server import LiveServer  # noqa: E402
from recorded import REQUESTS  # noqa: E402
from replay_harness import ANSWERS, MODEL_REPOSITORY, SETUPS, machine, replay, server_env  # noqa: E402


def record(setup: str) -> dict:
    runs = []
    for _ in range(2):
        with tempfile.TemporaryDirectory(prefix="replay-") as folder:
            env = server_env(setup, Path(folder))
            with LiveServer(MODEL_REPOSITORY, env=env, log_path=Path(folder) / "service.log").start(timeout=240) as s:
                runs.append(replay(s.url, REQUESTS))
    differing = [name for name in runs[0] if runs[0][name] != runs[1][name]]
    if differing:
        raise SystemExit(f"{setup}: answers differ between two runs: {differing}")
    return runs[0]


def main(argv: list[str]) -> None:
    answers = json.loads(ANSWERS.read_text(encoding="utf-8")) if ANSWERS.exists() else {}
    answers["machine"] = machine()
    for setup in argv or list(SETUPS):
        answers[setup] = record(setup)
        print(f"{setup}: {len(answers[setup])} answers")
    ANSWERS.write_text(json.dumps(answers, ensure_ascii=False, indent=1, sort_keys=True) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main(sys.argv[1:])

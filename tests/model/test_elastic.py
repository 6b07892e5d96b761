"""Elastic runs: torchrun restarts a worker killed mid-run and every rank resumes from the last complete
checkpoint. (A checkpoint written by two ranks resuming on one: tests/model/test_ddp.py, which has a
two-rank run already.)

The "nodes" are two torchrun agents of one process each on the loopback interface (c10d rendezvous, gloo).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from model_toys import tiny_run

from model.checkpoint import load_training_state

REPO = Path(__file__).resolve().parents[2]
TORCHRUN = Path(sys.executable).with_name("torchrun")

# The worker torchrun starts: model.cli train, with a fault injected from outside the trainer (the first rank 1
# SIGKILLs itself at KILL_AT_STEP, as a lost machine's process would die), and a record of each worker process:
# (restart count of its agent, rank, world, the step it resumed at).
WORKER = """
import json, os, signal, sys
from pathlib import Path

import model.train as train
from model.cli import main

attempt, rank = int(os.environ["TORCHELASTIC_RESTART_COUNT"]), int(os.environ["RANK"])
kill_at = int(os.environ.get("KILL_AT_STEP", "0"))
resume = train.Trainer.resume_if_present

def recording_resume(self):
    found = resume(self)
    record = {"attempt": attempt, "rank": rank, "world": self.world, "step": self.step}
    with open(Path(os.environ["ATTEMPTS"]) / f"{attempt}-{rank}-{os.getpid()}.json", "w") as f:
        json.dump(record, f)
    return found

train.Trainer.resume_if_present = recording_resume
killed = Path(os.environ["ATTEMPTS"]) / "killed"
if kill_at and rank == 1 and not killed.exists():
    step = train.Trainer.train_step

    def dying(self, batches):
        if self.step == kill_at:
            killed.touch()  # once: the restarted workers run to the end
            os.kill(os.getpid(), signal.SIGKILL)
        return step(self, batches)

    train.Trainer.train_step = dying
sys.exit(main(sys.argv[1:]))
"""


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHELASTIC", "RANK", "WORLD_SIZE", "MASTER"))}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    env.update(extra)
    return env


def _train_args(config: Path, corpus_dir: Path, out: Path) -> list[str]:
    return ["train", "--config", str(config), "--data", str(corpus_dir), "--out", str(out), "--no-progress"]


@pytest.mark.timeout(150)
def test_elastic_torchrun_restarts_a_killed_worker_and_ends_with_the_uninterrupted_updates(
    corpus_dir, tmp_path, free_port
):
    run = tiny_run(eval_every=4, keep_checkpoints=2, bleu_max_sentences=2, epochs=1)
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(run.to_dict()))
    worker, attempts, out = tmp_path / "worker.py", tmp_path / "attempts", tmp_path / "run"
    worker.write_text(WORKER)
    attempts.mkdir()
    kill_at = 6  # after the checkpoint of step 4: the restarted ranks redo steps 5 and 6
    env = _env(KILL_AT_STEP=str(kill_at), ATTEMPTS=str(attempts), TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1")
    agent = [
        str(TORCHRUN),
        "--nnodes=1:2",
        "--nproc-per-node=1",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint=127.0.0.1:{free_port}",
        "--rdzv-id=elastic-test",
        "--max-restarts=3",
        "--monitor-interval=0.5",
        "--local-addr=127.0.0.1",
        str(worker),
        *_train_args(config, corpus_dir, out),
    ]
    logs = [tmp_path / f"node{i}.log" for i in range(2)]
    with contextlib.ExitStack() as files:
        sinks = [files.enter_context(open(log, "w")) for log in logs]
        nodes = [subprocess.Popen(agent, cwd=REPO, env=env, stdout=f, stderr=subprocess.STDOUT) for f in sinks]
        try:
            codes = [node.wait(timeout=140) for node in nodes]
        finally:
            for node in nodes:
                if node.poll() is None:
                    node.kill()
    tails = "\n".join(f"--- {log.name}\n{log.read_text()[-3000:]}" for log in logs)
    assert codes == [0, 0], tails

    records = [json.loads(p.read_text()) for p in attempts.glob("*.json")]
    # each rank started twice (the agent whose worker died restarts it; the other one restarts its worker when
    # the first rejoins the rendezvous): at step 0, then from the last complete checkpoint, world 2 both times
    for rank in (0, 1):
        assert sorted(r["step"] for r in records if r["rank"] == rank) == [0, 4], records
    assert {r["world"] for r in records} == {2} and len(records) == 4, records
    # the uninterrupted run's number of updates: what attempt 0 planned (rank 0 prints it)
    planned = {_planned_steps(line) for log in logs for line in log.read_text().splitlines() if _first_plan(line)}
    assert len(planned) == 1, tails
    state = load_training_state(out / "checkpoints" / "last.pt")
    assert state["step"] == planned.pop() > kill_at and state["world"] == 2
    assert not list((out / "checkpoints").glob("*.tmp"))  # no half-written file left behind
    assert (out / "release" / "model.safetensors").is_file()


def _first_plan(line: str) -> bool:
    return line.startswith("model: ") and "resuming at step 0;" in line


def _planned_steps(line: str) -> int:
    """T of model.cli train's "model: ...; P training pairs (...); T steps; resuming at step S; ..." line."""
    return int(line.split(" steps;")[0].rsplit("; ", 1)[1].replace(",", ""))

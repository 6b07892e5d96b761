"""Two gloo processes (DDP) train on different batches and keep identical weights; their checkpoint resumes on one."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from model_toys import tiny_run

REPO = Path(__file__).resolve().parents[2]

RANK_SCRIPT = """
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from model.config import RunConfig
from model.train import Trainer

config, data, out = sys.argv[1:4]
trainer = Trainer.from_run(RunConfig.load(config), data, out, progress=False)
flat = lambda: torch.cat([p.detach().flatten() for p in trainer.model.parameters()])
start = flat()
trainer.train()
torch.save(
    {
        "rank": dist.get_rank(),
        "world": dist.get_world_size(),
        "start": start,
        "end": flat(),
        "step": trainer.step,
        "batches": trainer.epoch_batches(0),
    },
    Path(out) / f"rank{trainer.rank}.pt",
)
dist.barrier()
dist.destroy_process_group()
"""


STEPS = 4  # mid-epoch: 8 of the epoch's batches taken, 4 by each rank


@pytest.fixture(scope="module")
def two_rank_run(corpus_dir, tmp_path_factory) -> Path:
    """The run folder of 4 DDP steps by two gloo processes started as torchrun would (RANK, WORLD_SIZE, ...)."""
    import socket

    tmp_path = tmp_path_factory.mktemp("ddp")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:  # tests/conftest.py free_port is per test
        sock.bind(("127.0.0.1", 0))
        free_port = sock.getsockname()[1]
    run = tiny_run(max_steps=STEPS)
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(run.to_dict()))
    script = tmp_path / "rank.py"
    script.write_text(RANK_SCRIPT)
    out = tmp_path / "out"

    procs = []
    for rank in range(2):
        env = {
            **os.environ,
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": "2",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(free_port),
            "OMP_NUM_THREADS": "1",
            "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        }
        cmd = [sys.executable, str(script), str(config), str(corpus_dir), str(out)]
        procs.append(subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    try:
        outputs = [p.communicate(timeout=100)[0].decode(errors="replace") for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for rank, (p, output) in enumerate(zip(procs, outputs, strict=True)):
        assert p.returncode == 0, f"rank {rank} failed:\n{output[-3000:]}"
    return out


@pytest.mark.timeout(120)
def test_two_rank_gloo_run_keeps_weights_identical(two_rank_run):
    out, steps = two_rank_run, STEPS
    r0, r1 = (torch.load(out / f"rank{r}.pt", weights_only=True) for r in range(2))
    assert (r0["rank"], r0["world"], r1["rank"], r1["world"]) == (0, 2, 1, 2)
    assert r0["step"] == r1["step"] == steps
    assert r0["batches"] and r1["batches"] and r0["batches"] != r1["batches"]  # each rank its own data
    assert torch.equal(r0["start"], r1["start"])
    assert not torch.equal(r0["end"], r0["start"])  # training moved the weights
    assert torch.equal(r0["end"], r1["end"])  # gradients were averaged: the ranks stayed in step
    assert (out / "checkpoints" / "last.pt").is_file()  # rank 0 saved


@pytest.mark.timeout(120)
def test_elastic_checkpoint_of_two_ranks_resumes_on_one(two_rank_run, corpus_dir, tmp_path):
    from model.checkpoint import load_training_state
    from model.train import Trainer

    out = shutil.copytree(two_rank_run, tmp_path / "run")
    state = load_training_state(out / "checkpoints" / "last.pt")
    assert (state["step"], state["epoch"], state["batch_in_epoch"], state["world"]) == (STEPS, 0, 2 * STEPS, 2)

    resumed = Trainer.from_run(tiny_run(max_steps=STEPS + 2), corpus_dir, out, progress=False)
    assert (resumed.world, resumed.step, resumed.batch_in_epoch) == (1, STEPS, 2 * STEPS)
    assert all(torch.equal(state["model"][k], v) for k, v in resumed.model.state_dict().items())
    order = list(resumed.source.epoch_order(0))
    taken: list = []
    step = resumed.train_step
    resumed.train_step = lambda batches: (taken.extend(b.src.tolist() for b in batches), step(batches))[1]
    resumed.train()
    # one rank goes on where the two stopped: the next batches of the epoch's order, none repeated or skipped
    assert taken == [resumed.source.batch(key).src.tolist() for key in order[2 * STEPS : 2 * STEPS + 2]]
    assert (resumed.step, resumed.batch_in_epoch) == (STEPS + 2, 2 * STEPS + 2)

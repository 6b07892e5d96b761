"""model/malloc_tuning.py: which environment `python -m model.cli train` re-executes itself with."""

from __future__ import annotations

import os
import subprocess
import sys

from model.malloc_tuning import ENV, TUNABLES, tuned_environment


def test_glibc_gets_the_thresholds_and_keeps_the_rest_of_the_environment():
    env = tuned_environment({"PATH": "/bin"}, libc="glibc")
    assert env == {"PATH": "/bin", ENV: TUNABLES}


def test_tunables_the_user_set_are_kept_beside_ours():
    env = tuned_environment({ENV: "glibc.malloc.arena_max=2"}, libc="glibc")
    assert env[ENV] == f"glibc.malloc.arena_max=2:{TUNABLES}"


def test_nothing_changes_once_set_off_glibc_or_opted_out():
    assert tuned_environment({ENV: "glibc.malloc.mmap_threshold=1000"}, libc="glibc") is None  # also: no exec loop
    assert tuned_environment({ENV: TUNABLES}, libc="glibc") is None
    assert tuned_environment({}, libc="musl") is None
    assert tuned_environment({}, libc="") is None
    assert tuned_environment({"MTSERVE_MALLOC": "default"}, libc="glibc") is None


def test_the_train_command_runs_after_re_executing_itself():
    env = {k: v for k, v in os.environ.items() if k != ENV}
    done = subprocess.run(
        [sys.executable, "-m", "model.cli", "train", "--help"], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "--config" in done.stdout

"""model/malloc_tuning.py: which environment `python -m model.cli train` re-executes itself with."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

from model.malloc_tuning import (
    ENV,
    PRELOAD,
    TUNABLES,
    allocator,
    release_free_memory,
    tcmalloc_library,
    tuned_environment,
)


def test_glibc_without_tcmalloc_gets_the_thresholds_and_keeps_the_rest_of_the_environment():
    env = tuned_environment({"PATH": "/bin"}, libc="glibc", tcmalloc=None)
    assert env == {"PATH": "/bin", ENV: TUNABLES}
    assert allocator(env) == "glibc, thresholds raised" and allocator({}) == "default"


def test_tunables_the_user_set_are_kept_beside_ours():
    env = tuned_environment({ENV: "glibc.malloc.arena_max=2"}, libc="glibc", tcmalloc=None)
    assert env[ENV] == f"glibc.malloc.arena_max=2:{TUNABLES}"


def test_tcmalloc_is_preloaded_where_installed_unless_the_tunables_are_asked_for():
    tc = "libtcmalloc_minimal.so.4"
    env = tuned_environment({"PATH": "/bin"}, libc="glibc", tcmalloc=tc)
    assert env == {"PATH": "/bin", PRELOAD: tc} and allocator(env) == "tcmalloc"
    assert tuned_environment({PRELOAD: "libfoo.so"}, libc="glibc", tcmalloc=tc)[PRELOAD] == f"{tc}:libfoo.so"
    assert tuned_environment({}, libc="musl", tcmalloc=tc) == {PRELOAD: tc}  # tcmalloc needs no glibc
    assert tuned_environment({"MTSERVE_MALLOC": "tunables"}, libc="glibc", tcmalloc=tc)[ENV] == TUNABLES
    assert tuned_environment({PRELOAD: tc}, libc="glibc", tcmalloc=tc) is None  # the re-executed process


def test_nothing_changes_once_set_off_glibc_without_tcmalloc_or_opted_out():
    for tc in (None, "libtcmalloc_minimal.so.4"):
        assert tuned_environment({ENV: "glibc.malloc.mmap_threshold=1000"}, libc="glibc", tcmalloc=tc) is None
        assert tuned_environment({ENV: TUNABLES}, libc="glibc", tcmalloc=tc) is None  # also: no exec loop
        assert tuned_environment({"MTSERVE_MALLOC": "default"}, libc="glibc", tcmalloc=tc) is None
    assert tuned_environment({}, libc="musl", tcmalloc=None) is None
    assert tuned_environment({}, libc="", tcmalloc=None) is None


@pytest.mark.parametrize("choice", ["", "tunables"])
def test_the_train_command_runs_after_re_executing_itself(choice):
    env = {k: v for k, v in os.environ.items() if k not in (ENV, PRELOAD)} | {"MTSERVE_MALLOC": choice}
    done = subprocess.run(
        [sys.executable, "-m", "model.cli", "train", "--help"], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "--config" in done.stdout


@pytest.mark.skipif(tcmalloc_library() is None, reason="tcmalloc is not installed (Debian: libtcmalloc-minimal4)")
def test_preloaded_tcmalloc_is_what_the_process_allocates_with():
    env = tuned_environment({k: v for k, v in os.environ.items() if k not in (ENV, PRELOAD)})
    maps = "print(any('tcmalloc' in line for line in open('/proc/self/maps')))"
    done = subprocess.run([sys.executable, "-c", maps], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "True", done.stderr


# Under the tunables, freed chunks stay resident (the trim threshold is never reached); holes are made by keeping
# every other block alive, so nothing is at the heap's top either. malloc_trim(0) must give their pages back.
_HOLES = """
import ctypes
from model.malloc_tuning import release_free_memory
libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
def rss():
    return int(next(l for l in open("/proc/self/status") if l.startswith("VmRSS")).split()[1]) // 1024
blocks = [libc.malloc(8 << 20) for _ in range(64)]
for b in blocks:
    ctypes.memset(b, 1, 8 << 20)
for b in blocks[::2]:
    libc.free(b)
before = rss()
assert release_free_memory()
print(before, rss())
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_free_holes_kept_under_the_tunables_go_back_to_the_kernel():
    env = dict(os.environ) | {ENV: TUNABLES}
    done = subprocess.run([sys.executable, "-c", _HOLES], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    before, after = map(int, done.stdout.split())
    assert before - after >= 200, (before, after)  # 32 freed blocks of 8 MB: 256 MB


def test_release_free_memory_is_a_no_op_off_glibc(monkeypatch):
    from model import malloc_tuning

    malloc_tuning._libc_trim.cache_clear()
    monkeypatch.setattr(malloc_tuning.platform, "libc_ver", lambda: ("", ""))
    try:
        assert release_free_memory() is False
    finally:
        malloc_tuning._libc_trim.cache_clear()


def test_a_restart_is_asked_for_only_under_the_tunables_with_much_resident_and_much_of_it_free():
    from model.malloc_tuning import RESTART_FRACTION, restart_for_memory

    tuned, gb = {ENV: TUNABLES}, 1 << 30
    total = 24 * gb
    above = int(RESTART_FRACTION * total) + gb
    assert restart_for_memory(tuned, resident=above, free=above // 2, total=total) == (above, above // 2)
    assert restart_for_memory(tuned, resident=above, free=above // 4, total=total) is None  # mostly in use
    assert restart_for_memory(tuned, resident=above - 2 * gb, free=above, total=total) is None  # below the bound
    assert restart_for_memory({}, resident=above, free=above, total=total) is None  # glibc's defaults: no holes
    assert restart_for_memory({ENV: "glibc.malloc.arena_max=2"}, resident=above, free=above, total=total) is None


def test_no_restart_where_the_free_heap_cannot_be_read(monkeypatch):
    from model import malloc_tuning

    monkeypatch.setattr(malloc_tuning, "heap_free_bytes", lambda: None)  # not glibc, or glibc before 2.33
    assert malloc_tuning.restart_for_memory({ENV: TUNABLES}, resident=1 << 40, total=1 << 30) is None


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallinfo2 is glibc's")
def test_free_heap_bytes_count_the_holes_of_freed_blocks():
    from model.malloc_tuning import heap_free_bytes, resident_bytes

    free = "from model.malloc_tuning import heap_free_bytes\nprint(heap_free_bytes())"
    script = _HOLES.replace("before = rss()", "before = rss()\n" + free)
    env = dict(os.environ) | {ENV: TUNABLES}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout.split()[0]) >= 32 * (8 << 20)  # the 32 freed 8 MB blocks
    assert heap_free_bytes() >= 0 and resident_bytes() > 0

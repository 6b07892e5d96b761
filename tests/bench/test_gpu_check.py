"""scripts/gpu_check.sh and bench/gpu_check.py without a GPU: the "no GPU" exit, the wheel-versus-driver preflight
(fake nvidia-smi and wheels), and the whole measurement run on the CPU provider with the tiny bundle."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from tiny_bundle import SAMPLE_SENTENCES, WORD_MAP

from bench import gpu_check

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu_check.sh"
PIN = gpu_check.pinned_version()
TAG = f"cp{sys.version_info[0]}{sys.version_info[1]}"


def fake_nvidia_smi(folder: Path, banner: str, status: int = 0) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    smi = folder / "nvidia-smi"
    smi.write_text(
        '#!/bin/sh\nif [ "$1" = "-L" ]; then echo "GPU 0: NVIDIA H200 (UUID: GPU-0)"; exit 0; fi\n'
        f"echo '{banner}'\nexit {status}\n"
    )
    smi.chmod(0o755)
    return smi


def fake_wheel(folder: Path, runtime_requirement: str, version: str = PIN) -> Path:
    """A wheel file whose METADATA names the CUDA runtime the way onnxruntime-gpu's [cuda] extra does."""
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / f"onnxruntime_gpu-{version}-{TAG}-{TAG}-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(
            f"onnxruntime_gpu-{version}.dist-info/METADATA",
            f"Name: onnxruntime-gpu\nVersion: {version}\nRequires-Dist: numpy>=1.21.6\n"
            f'Requires-Dist: {runtime_requirement}; extra == "cuda"\n',
        )
    return wheel


def run_script(tmp_path: Path, path_dirs: list[Path], *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": os.pathsep.join([*map(str, path_dirs), "/usr/bin", "/bin"]), "PYTHON": sys.executable}
    return subprocess.run(
        ["bash", str(SCRIPT), "--data", str(tmp_path), *args], capture_output=True, text=True, env=env, timeout=120
    )


def test_without_a_gpu_the_script_says_so_and_exits_0(tmp_path):
    if any((Path(d) / "nvidia-smi").exists() for d in ("/usr/bin", "/bin")):
        pytest.skip("this machine has nvidia-smi in /usr/bin or /bin")
    result = run_script(tmp_path, [])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no GPU: nvidia-smi not found" in result.stdout
    smi = fake_nvidia_smi(tmp_path / "bin", "No devices were found", status=6)
    result = run_script(tmp_path, [smi.parent])
    assert result.returncode == 0 and "no GPU: nvidia-smi found no usable device" in result.stdout


def test_a_wheel_for_another_cuda_major_is_refused_naming_the_one_to_carry(tmp_path):
    smi = fake_nvidia_smi(tmp_path / "bin", "| NVIDIA-SMI 550.54  Driver Version: 550.54  CUDA Version: 12.4 |")
    wheels = tmp_path / "wheels"
    fake_wheel(wheels, "nvidia-cuda-runtime~=13.0")
    result = run_script(tmp_path, [smi.parent], "--wheels", str(wheels))
    assert result.returncode == 2, result.stdout + result.stderr
    assert "the wheel needs CUDA 13, the driver offers CUDA 12" in result.stdout
    assert "onnxruntime-gpu 1.26.0" in result.stdout and "pip download" in result.stdout


def test_a_missing_wheel_is_refused_with_the_download_command(tmp_path):
    smi = fake_nvidia_smi(tmp_path / "bin", "| NVIDIA-SMI 580.159.03  Driver Version: 580.159.03  CUDA Version: 13.0 |")
    result = run_script(tmp_path, [smi.parent], "--wheels", str(tmp_path / "empty"))
    assert result.returncode == 2
    assert f"onnxruntime_gpu-{PIN}-*.whl" in result.stdout and f"onnxruntime-gpu=={PIN}" in result.stdout


def test_a_matching_wheel_passes_the_preflight(tmp_path, capsys):
    smi = fake_nvidia_smi(tmp_path / "bin", "| NVIDIA-SMI 580.159.03  Driver Version: 580.159.03  CUDA Version: 13.0 |")
    wheel = fake_wheel(tmp_path / "wheels", "nvidia-cuda-runtime~=13.0")
    fake_wheel(tmp_path / "wheels", "nvidia-cuda-runtime~=13.0", version="1.30.0")  # not the pinned one
    assert gpu_check.preflight(tmp_path / "wheels", nvidia_smi=str(smi)) == (0, wheel)
    assert "NVIDIA H200" in capsys.readouterr().out


def test_cuda_majors_of_wheels_drivers_and_releases(tmp_path):
    assert gpu_check.wheel_cuda_major(fake_wheel(tmp_path / "a", "nvidia-cuda-runtime-cu12~=12.0")) == 12
    assert gpu_check.wheel_cuda_major(fake_wheel(tmp_path / "b", "nvidia-cuda-runtime~=13.0")) == 13
    assert gpu_check.driver_cuda_version("Driver Version: 580.159.03   CUDA Version: 13.0") == (13, 0)
    assert gpu_check.driver_cuda_version("no banner") is None
    assert [gpu_check.release_cuda_major(v) for v in ("1.19.0", "1.26.0", "1.27.0", "1.31.1")] == [12, 12, 13, 13]
    assert gpu_check.release_cuda_major(PIN) == 13  # the GPU machines lent here have CUDA 13 drivers


def test_the_measurement_run_works_end_to_end_on_the_cpu_provider(tmp_path, tiny_bundle_dir, tiny_model_dir, capsys):
    """Every step of `run` but the GPU: fp16 step graph conversion, I/O-binding engines, BLEU, tok/s, table, JSON."""
    data = tmp_path / "multi30k"
    data.mkdir()
    (data / "test_2016_flickr.de").write_text("\n".join(SAMPLE_SENTENCES) + "\n")
    english = [" ".join(WORD_MAP.get(w, w) for w in s.split()) for s in SAMPLE_SENTENCES]
    (data / "test_2016_flickr.en").write_text("\n".join(english) + "\n")
    out = tmp_path / "report.json"
    args = ["run", "--provider", "cpu", "--data", str(data), "--bundle", str(tiny_bundle_dir)]
    args += ["--checkpoint", str(tiny_model_dir / "release"), "--sentences", "3", "--out", str(out)]
    assert gpu_check.main(args) == 0
    report = json.loads(out.read_text())
    assert set(report["providers"]) == {"ort-fp16", "ort-fp32"}
    assert all(p == ["CPUExecutionProvider"] for e in report["providers"].values() for p in e.values())
    assert set(report["providers"]["ort-fp16"]) == {"encoder", "decoder_step", "gather"}  # I/O-binding search
    assert len(report["bleu"]) == 4 and all(b["cpu"] > 0 for b in report["bleu"].values())
    assert report["errors"] == {} and len(report["tok_s"]) + len(report["skipped"]) == 18
    assert all(rate > 0 for rate in report["tok_s"].values())
    printed = capsys.readouterr().out
    assert "| greedy, 1 |" in printed and "| beam4, 256 |" in printed
    assert not (tiny_bundle_dir / "graphs" / "fp16.decoder_step.onnx").exists()  # the bundle is left as it was


@pytest.mark.parametrize("line", ["onnxruntime-gpu==1.31.1", "onnxruntime-gpu[cuda,cudnn]==1.31.1  # note"])
def test_pinned_version_reads_the_requirement_line(tmp_path, line):
    pins = tmp_path / "requirements-gpu.txt"
    pins.write_text(f"# comment\n{line}\n")
    assert gpu_check.pinned_version(pins) == "1.31.1"

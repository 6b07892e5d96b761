"""No coroutine is called and dropped (issue 55: LibreTranslate's /translate_file called ``_check_rate(...)`` without
``await``, so the key's rate limit never ran). Read from the source with ast: a statement that is nothing but a call
of a coroutine function of the same module (or ``self.<method>`` of the same class) creates a coroutine and throws
it away.
At run time the same mistake fails the tests too: pyproject's filterwarnings turns "coroutine ... was never
awaited" into an error, and tests/live_server.py fails a server whose log shows one."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("core", "model", "export", "service", "bench")


def _trees() -> dict[Path, ast.Module]:
    files = [p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))]
    return {p: ast.parse(p.read_text(encoding="utf-8"), filename=str(p)) for p in files}


def _async_defs(scope: ast.AST) -> set[str]:
    """Names defined ``async def`` directly in a module or class body (functions nested in them included), less
    names also defined plain ``def`` there."""
    async_names, sync_names = set(), set()
    todo = list(ast.iter_child_nodes(scope))
    while todo:
        node = todo.pop()
        if isinstance(node, ast.ClassDef):
            continue  # its methods are its own
        if isinstance(node, ast.AsyncFunctionDef):
            async_names.add(node.name)
        elif isinstance(node, ast.FunctionDef):
            sync_names.add(node.name)
        todo.extend(ast.iter_child_nodes(node))
    return async_names - sync_names


def dropped_coroutines(trees: dict[Path, ast.Module]) -> list[str]:
    """'file:line name()' for each statement that is only a call of a coroutine function the call resolves to
    without types: ``f(...)`` with ``f`` an ``async def`` of the same module, ``self.m(...)`` with ``m`` an
    ``async def`` of the enclosing class."""
    found = []
    for path, tree in trees.items():
        module_async = _async_defs(tree)
        classes = [tree, *(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef))]
        for scope in classes:
            methods = _async_defs(scope) if isinstance(scope, ast.ClassDef) else set()
            body = scope.body
            for node in (n for stmt in body for n in ast.walk(stmt)):
                if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)):
                    continue
                func = node.value.func
                if isinstance(func, ast.Name) and func.id in module_async and scope is tree:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} {func.id}()")
                elif (
                    isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self"
                    and func.attr in methods
                ):  # fmt: skip
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} self.{func.attr}()")
    return sorted(set(found))


def test_no_coroutine_is_called_without_await():
    assert dropped_coroutines(_trees()) == []


def test_the_check_finds_a_dropped_coroutine():
    source = (
        "async def check(x):\n    pass\n\nasync def handler(r):\n    check(r)\n    await check(r)\n\n"
        "class C:\n    async def m(self):\n        pass\n\n    async def run(self):\n        self.m()\n"
    )
    trees = {ROOT / "service" / "example.py": ast.parse(source)}
    assert dropped_coroutines(trees) == ["service/example.py:13 self.m()", "service/example.py:5 check()"]

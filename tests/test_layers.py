"""The layering of docs/architecture.md, enforced: every import in tfviz/, ui/, app_pages/ and app.py —
module-level and inside functions — goes down the layers, never up, and never in a circle.

A module's layer is its group's rank (below). An import may reach a lower rank, or its own group;
two different groups of the same rank are independent. Importing ``a.b.c`` also runs the packages
``a`` and ``a.b``, so an edge to a module is an edge to its packages too (the way Python runs them).
"""
from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# group -> rank. A group is a module or package name; the longest matching prefix wins.
RANKS = {
    # foundations: each knows nothing of the others
    "tfviz.version": 0, "tfviz.paths": 0, "tfviz.device": 0, "tfviz.tokenize": 0,
    "tfviz.limits": 0,   # what one session may make the server do (environment variables)
    "tfviz.storage": 0,  # the file format: tensors + JSON, nothing about models, training or tasks
    "tfviz.viz": 0,      # figures: arrays in, plotly out (no torch, no model)
    "tfviz.model": 1,    # the network, its config and registries
    "tfviz.recording": 2, "tfviz.tasks": 2,
    "tfviz.analysis": 3, "tfviz.generation": 3,
    "tfviz.lesson": 3,   # the lesson's words from numbers (no torch, no Streamlit)
    "tfviz.train": 4,    # training, and the checkpoint it writes (tfviz.train.checkpoint)
    "tfviz.publish": 5, "tfviz.zoo": 5,
    "tfviz.runs": 5,     # runs as records: store, workers, executors, Ray, the managers (above train)
    "tfviz.interop": 5,  # outside formats: Hugging Face folders -> Checkpoint, GPT-2 out
    "tfviz.bench": 6,    # measures everything, interop included (python -m tfviz.bench hf)
    "tfviz.classroom": 6,  # a shared server's policy: quota, uploads, model cache, teacher key
    "tfviz.cli": 6, "tfviz.__main__": 7, "tfviz": 8,  # the package root exports the public API
    "ui": 9, "app_pages": 10, "app": 10,
}
FORBIDDEN_EXTERNAL = {
    "tfviz": ("streamlit",),
    "tfviz.viz": ("streamlit", "torch"),
    "tfviz.storage": ("streamlit", "tfviz"),
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def sources() -> dict[str, Path]:
    files = [*ROOT.glob("tfviz/**/*.py"), *ROOT.glob("ui/*.py"), *ROOT.glob("app_pages/*.py"), ROOT / "app.py"]
    return {module_name(p): p for p in files}


def imports(name: str, path: Path) -> list[tuple[str, int]]:
    """(imported module, line) for every import statement anywhere in the file."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module
            out.append((target, node.lineno))
            out += [(f"{target}.{a.name}", node.lineno) for a in node.names]  # submodules, if they are
    return out


def graph() -> dict[str, dict[str, int]]:
    """module -> {imported project module: line}, with the packages each import runs."""
    mods = sources()
    edges: dict[str, dict[str, int]] = defaultdict(dict)
    for name, path in mods.items():
        for target, line in imports(name, path):
            parts = target.split(".")
            for i in range(1, len(parts) + 1):
                dep = ".".join(parts[:i])
                own_ancestor = name == dep or name.startswith(dep + ".")
                if dep in mods and not own_ancestor:
                    edges[name].setdefault(dep, line)
    return edges


def group(name: str) -> str:
    return max((g for g in RANKS if name == g or name.startswith(g + ".")), key=len)


def test_every_module_has_a_layer():
    assert all(group(m) for m in sources())


def test_imports_only_go_down_the_layers():
    bad = []
    for name, deps in graph().items():
        g = group(name)
        for dep, line in deps.items():
            h = group(dep)
            if h != g and RANKS[h] >= RANKS[g]:
                bad.append(f"{sources()[name].relative_to(ROOT)}:{line}: {name} ({g}, layer {RANKS[g]}) "
                           f"imports {dep} ({h}, layer {RANKS[h]})")
    assert not bad, "imports against the layering (docs/architecture.md):\n" + "\n".join(bad)


def test_no_import_cycles_not_even_inside_functions():
    edges = graph()
    index, low, stack, on_stack, cycles, counter = {}, {}, [], set(), [], [0]

    def visit(v):  # Tarjan's strongly connected components
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(sources()):
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"


@pytest.mark.parametrize("prefix", sorted(FORBIDDEN_EXTERNAL))
def test_forbidden_libraries(prefix):
    bad = []
    for name, path in sources().items():
        if group(name) == prefix or (prefix == "tfviz" and name.startswith("tfviz")):
            for target, line in imports(name, path):
                top = target.split(".")[0]
                if top in FORBIDDEN_EXTERNAL[prefix] and not (top == "tfviz" and target.startswith(name)):
                    bad.append(f"{path.relative_to(ROOT)}:{line}: imports {target}")
    assert not bad, f"{prefix} must not import {FORBIDDEN_EXTERNAL[prefix]}:\n" + "\n".join(bad)


def test_the_checker_sees_function_local_imports(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("def f():\n    from ..train import loop\n")
    assert ("tfviz.train", 2) in imports("tfviz.model.m", f)

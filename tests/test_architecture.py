"""The floors of simdist (docs/architecture.md), checked on the source: no import cycle among simdist's modules
(imports inside functions included), each floor imports only the floors below it, and the core never imports
the packages built on it (fakes, properties, benchmarks) or the tests."""
import ast
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# installed name -> folder (pyproject.toml's package-dir)
PACKAGES = {"simdist": "simdist", "simdist.fakes": "fakes", "simdist.properties": "properties",
            "simdist.benchmarks": "benchmarks"}
# each floor and the floors it may import (besides itself)
FLOORS = {
    "simdist.engine": set(),
    "simdist.faces": {"simdist.engine"},
    "simdist.ranks": {"simdist.engine"},
}
CORE_MAY_NOT_IMPORT = ("simdist.fakes", "simdist.properties", "simdist.benchmarks", "tests")


def _modules():
    mods = {}
    for pkg, folder in PACKAGES.items():
        base = os.path.join(ROOT, folder)
        for dirpath, dirs, files in os.walk(base):
            if "__pycache__" in dirpath:
                continue
            rel = os.path.relpath(dirpath, base)
            parts = [] if rel == "." else rel.split(os.sep)
            if pkg == "simdist" and parts[:1] in (["fakes"], ["properties"], ["benchmarks"]):
                continue
            for f in files:
                if not f.endswith(".py"):
                    continue
                name = ".".join([pkg, *parts] + ([] if f == "__init__.py" else [f[:-3]]))
                mods[name] = (os.path.join(dirpath, f), f == "__init__.py")
    return mods


def _imports(name, path, is_pkg, mods):
    tree = ast.parse(open(path).read(), path)
    package = name if is_pkg else name.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(tree):  # every import, at module level or inside functions
        if isinstance(node, ast.Import):
            for a in node.names:
                out.add(a.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            for a in node.names:
                sub = f"{mod}.{a.name}"
                out.add(sub if sub in mods else mod)
    return {m for m in out if m in mods or m.split(".")[0] == "tests"}


def _graph():
    mods = _modules()
    return {m: _imports(m, p, is_pkg, mods) for m, (p, is_pkg) in mods.items()}


def _cycles(graph):
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in graph.get(v, ()):
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _floor(mod):
    for f in FLOORS:
        if mod == f or mod.startswith(f + "."):
            return f
    return None


def test_no_import_cycle():
    assert _cycles(_graph()) == []


def test_each_floor_imports_only_the_floors_below():
    bad = []
    for mod, deps in _graph().items():
        f = _floor(mod)
        if f is None:
            continue
        for d in deps:
            df = _floor(d)
            if d.startswith("simdist") and df != f and df not in FLOORS[f]:
                bad.append(f"{mod} -> {d}")
    assert bad == []


def test_the_core_never_imports_what_is_built_on_it():
    bad = []
    for mod, deps in _graph().items():
        if mod.startswith(("simdist.fakes", "simdist.properties", "simdist.benchmarks")):
            continue
        bad += [f"{mod} -> {d}" for d in deps if d.startswith(CORE_MAY_NOT_IMPORT)]
    assert bad == []


def test_fakes_do_not_import_properties():
    bad = [f"{m} -> {d}" for m, deps in _graph().items() if m.startswith("simdist.fakes")
           for d in deps if d.startswith("simdist.properties")]
    assert bad == []


def test_the_checker_sees_imports_inside_functions(tmp_path):
    graph = {"a": {"b"}, "b": {"a"}}
    assert _cycles(graph) == [["a", "b"]]
    src = tmp_path / "m.py"
    src.write_text("def f():\n    from .x import y\n")
    assert _imports("pkg.m", str(src), False, {"pkg.x": None, "pkg.x.y": None}) == {"pkg.x.y"}


# ------------------------------------------------------------------------------------------- the picture
# docs/architecture.md shows the floors as a Mermaid graph generated from the import graph above; the test below
# keeps it current (`python tests/test_architecture.py` prints the block to paste).
_UNITS = [("engine", "simdist.engine"), ("faces", "simdist.faces"), ("ranks", "simdist.ranks"),
          ("session", "simdist.session"), ("result", "simdist.result"), ("launcher", "simdist.launcher"),
          ("forkserver", "simdist.forkserver"), ("api", "simdist.api"), ("witness", "simdist.witness"),
          ("cli", "simdist.cli"), ("trace", "simdist.trace"), ("fakes", "simdist.fakes"),
          ("properties", "simdist.properties"), ("benchmarks", "simdist.benchmarks")]


def _unit(mod):
    for name, prefix in _UNITS:
        if mod == prefix or mod.startswith(prefix + "."):
            return name
    return None


def diagram():
    """The Mermaid block of docs/architecture.md: one node per floor or top-level module, an edge A --> B when
    some module of A imports one of B (at module level or inside a function)."""
    edges = set()
    for mod, deps in _graph().items():
        a = _unit(mod)
        for d in deps:
            b = _unit(d)
            if a and b and a != b:
                edges.add((a, b))
    names = [n for n, _ in _UNITS if any(n in e for e in edges)]
    lines = ["```mermaid", "graph TD"]
    lines += [f"  {a} --> {b}" for a in names for b in names if (a, b) in edges]
    lines.append("```")
    return "\n".join(lines)


def test_the_architecture_diagram_is_current():
    doc = open(os.path.join(ROOT, "docs", "architecture.md")).read()
    assert diagram() in doc, "docs/architecture.md's graph is stale; paste `python tests/test_architecture.py`:\n" \
        + diagram()


if __name__ == "__main__":
    print(diagram())

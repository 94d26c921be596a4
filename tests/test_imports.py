"""The import graph of the project's packages: layered, without cycles, every import at the top of its module.

The layers (README.md, the table of folders): the engine `ddd` at the bottom, its programs `ddd.train` and `ddd.bench` on top of
it, then the views (`components`), then the app (`explorer`, `app.py`). A module imports only from its own
layer or those below, never in a cycle, and never from inside a function, where a cycle or a heavy import
would hide until that function runs.
"""
import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("ddd", "components", "explorer")
LAYERS = {"ddd": 0, "ddd.train": 1, "ddd.bench": 1, "components": 2, "explorer": 3, "app": 4}
# Imported where used: present on a ZeroGPU Space only.
OPTIONAL = {"spaces"}


def project_files() -> list[Path]:
    return [*(p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))), ROOT / "app.py"]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer(module: str) -> int:
    return max(rank for prefix, rank in LAYERS.items() if module == prefix or module.startswith(prefix + "."))


def imported_modules(node: ast.Import | ast.ImportFrom, package: str, modules: set[str]) -> set[str]:
    """The project's modules that one import statement loads (a package's `from . import x` loads x)."""
    if isinstance(node, ast.Import):
        return {a.name for a in node.names if a.name in modules}
    base = node.module or ""
    if node.level:
        parts = package.split(".")[: len(package.split(".")) - node.level + 1]
        base = ".".join([*parts, base] if base else parts)
    found = {f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in modules}
    return found | ({base} if base in modules else set())


def graph() -> tuple[dict[str, set[str]], list[str]]:
    """Each module's imports of other project modules, and every import made inside a function."""
    files = {module_name(p): p for p in project_files()}
    modules = set(files)
    edges: dict[str, set[str]] = {}
    nested = []
    for module, path in files.items():
        tree = ast.parse(path.read_text(), str(path))
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        edges[module] = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                edges[module] |= imported_modules(node, package, modules) - {module}
        for func in ast.walk(tree):
            if isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for node in ast.walk(func):
                    if isinstance(node, ast.Import) and {a.name for a in node.names} <= OPTIONAL:
                        continue
                    if isinstance(node, (ast.Import, ast.ImportFrom)):
                        nested.append(f"{module}:{node.lineno} {ast.unparse(node)}")
    return edges, nested


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while not component or component[-1] != v:
                component.append(stack.pop())
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles():
    assert cycles(graph()[0]) == []


def test_no_module_imports_from_a_layer_above_it():
    edges, _ = graph()
    upward = [f"{m} -> {d}" for m, deps in edges.items() for d in deps if layer(d) > layer(m)]
    assert upward == []


def test_every_import_sits_at_the_top_of_its_module():
    assert graph()[1] == []


def test_the_views_metrics_load_without_torch():
    """The views read traces through ddd.metrics and ddd.trace; the engine's names load only when used."""
    code = "import sys, ddd, ddd.metrics, ddd.trace; assert 'torch' not in sys.modules, 'torch was imported'"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr

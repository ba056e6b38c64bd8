"""No import cycles among tfrecord_io's modules, and imports point down the layers.

A cycle works until someone moves an import to the top of a file, or imports the other
module first, and then one of the two sees the other half-initialised. The usual way
around it, an import inside a function, only hides the cycle: it is still there, and it
still says the two modules are one. So every import counts here, the ones inside
functions included (``if TYPE_CHECKING:`` blocks excepted: they never run).

The graph is read from the source (``ast``), not by importing: nothing optional (Beam,
torch, matplotlib) needs to be installed for the test, and a lazy import is seen as well
as an eager one.
"""

from __future__ import annotations

import ast
import os
from typing import Callable, Dict, List, Set, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "tfrecord_io"


def _modules(root: str) -> Dict[str, Tuple[str, bool]]:
    """module name -> (source path, is a package); compiled extensions as ("", False)."""
    out: Dict[str, Tuple[str, bool]] = {}
    for dirpath, dirnames, filenames in os.walk(os.path.join(root, PACKAGE)):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        rel_dir = os.path.relpath(dirpath, root).replace(os.sep, ".")
        for name in filenames:
            stem, ext = name.split(".", 1)[0], os.path.splitext(name)[1]
            if ext == ".py":
                if stem == "__init__":
                    out[rel_dir] = (os.path.join(dirpath, name), True)
                else:
                    out[f"{rel_dir}.{stem}"] = (os.path.join(dirpath, name), False)
            elif ext in (".so", ".pyd", ".c"):  # the C core (_speedups): imports nothing of ours
                out.setdefault(f"{rel_dir}.{stem}", ("", False))
    return out


def _type_checking_nodes(tree: ast.AST) -> Set[int]:
    """ids of the nodes under ``if TYPE_CHECKING:`` (never executed)."""
    skip: Set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If):
            test = node.test
            name = test.id if isinstance(test, ast.Name) else test.attr if isinstance(test, ast.Attribute) else ""
            if name == "TYPE_CHECKING":
                for child in node.body:
                    skip.update(id(n) for n in ast.walk(child))
    return skip


def _owner(name: str, modules: Dict[str, Tuple[str, bool]]) -> str:
    """The module of ours ``name`` (a dotted import target) is, or is in; "" if none."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name


def import_graph(root: str = ROOT) -> Dict[str, Set[str]]:
    """module -> the modules of ours it imports, anywhere in its body."""
    modules = _modules(root)
    graph: Dict[str, Set[str]] = {}
    for name, (path, is_package) in modules.items():
        deps: Set[str] = set()
        graph[name] = deps
        if not path:
            continue
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        package = name if is_package else name.rpartition(".")[0]
        skip = _type_checking_nodes(tree)
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if isinstance(node, ast.Import):
                deps.update(_owner(alias.name, modules) for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
                else:
                    base = node.module or ""
                for alias in node.names:
                    # "from pkg import mod" imports the module pkg.mod; "from mod import name" imports mod
                    full = f"{base}.{alias.name}"
                    deps.add(full if full in modules else _owner(base, modules))
        deps.discard("")
        deps.discard(name)
    return graph


def cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    found: List[List[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _describe(component: List[str], graph: Dict[str, Set[str]]) -> str:
    members = set(component)
    return "\n".join(f"  {m} -> {', '.join(sorted(graph[m] & members))}" for m in component)


def test_no_import_cycles_among_our_modules():
    graph = import_graph()
    assert (
        "tfrecord_io.pipelines.runtime.beam_options" in graph and "tfrecord_io.format.framing" in graph
    )  # the walk saw them
    # object access (ranged reads, the stores) is storage's, below the format it serves
    assert "tfrecord_io.storage.remote_objects" in graph["tfrecord_io.storage.range_reads"]
    assert "tfrecord_io.storage.range_reads" in graph["tfrecord_io.format.remote_reader"]
    found = cycles(graph)
    assert not found, "import cycles (imports inside functions count too):\n" + "\n\n".join(
        _describe(c, graph) for c in found
    )


def test_the_graph_sees_function_level_and_relative_imports():
    """The checker itself: a cycle made only of an import inside a function, and one of
    relative imports, are both found (a checker that misses them would pass anything)."""
    graph = {
        "a": {"b"},
        "b": {"c"},
        "c": {"a"},  # closes a -> b -> c -> a
        "d": {"a"},
    }
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"x": {"y"}, "y": set()}) == []


def test_function_level_import_is_an_edge(tmp_path):
    pkg = tmp_path / PACKAGE
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "one.py").write_text("def f():\n    from .two import g\n    return g\n")
    (pkg / "sub" / "two.py").write_text("from tfrecord_io.sub import one\n")
    (pkg / "three.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from tfrecord_io.sub import one\n"
    )
    (pkg / "_speedups.c").write_text("")
    (pkg / "four.py").write_text("from ._speedups import x\n")
    graph = import_graph(str(tmp_path))
    assert graph["tfrecord_io.sub.one"] == {"tfrecord_io.sub.two"}
    assert graph["tfrecord_io.sub.two"] == {"tfrecord_io.sub.one"}
    assert graph["tfrecord_io.three"] == set()  # TYPE_CHECKING imports never run
    assert graph["tfrecord_io.four"] == {"tfrecord_io._speedups"}  # the C core, not the package
    assert cycles(graph) == [["tfrecord_io.sub.one", "tfrecord_io.sub.two"]]


# Layers, lowest first (ARCHITECTURE; the docstrings of tfrecord_io/{storage,format,dataset,beam}
# and tfrecord_io/pipelines/__init__.py): a module may import its own layer and layers of a
# lower rank. Layers of the same rank are siblings and never import each other (Beam IO and
# torch: each must work without the other installed). The first layer that claims a module is
# its layer; every module has one.
def _under(*names: str) -> Callable[[str], bool]:
    return lambda m: any(m == n or m.startswith(n + ".") for n in names)


_JOBS = tuple(
    f"tfrecord_io.pipelines.{j}" for j in ("validate_job", "inspect_job", "reshard_job", "index_job", "demo_data")
)
LAYERS: List[Tuple[str, int, Callable[[str], bool]]] = [
    (
        "the exception families and private helpers",
        0,
        lambda m: (
            m == "tfrecord_io"  # the package itself (its lazy names are exempt below)
            or _under(
                "tfrecord_io.errors",
                "tfrecord_io.usage_errors",
                "tfrecord_io._lazy",
                "tfrecord_io._moved",
                "tfrecord_io._version",
                "tfrecord_io._speedups",
                "tfrecord_io.proto",
                "tfrecord_io.iterator_utils",
            )(m)
        ),
    ),
    ("storage", 1, _under("tfrecord_io.storage")),
    ("format core", 2, _under("tfrecord_io.format")),
    ("dataset layout", 3, _under("tfrecord_io.dataset", "tfrecord_io.arrow")),
    ("Beam IO", 4, _under("tfrecord_io.beam")),
    ("torch", 4, _under("tfrecord_io.torch")),
    ("command-line tools", 4, _under("tfrecord_io.tools")),
    ("transforms", 5, _under("tfrecord_io.transforms")),
    ("pipelines.runtime", 6, _under("tfrecord_io.pipelines.runtime")),
    ("pipelines.report", 7, _under("tfrecord_io.pipelines.report")),
    ("pipelines' jobs", 8, lambda m: _under("tfrecord_io.pipelines.building", *_JOBS)(m)),
    ("pipelines' command line", 9, _under("tfrecord_io.pipelines", "tfrecord_io.__main__")),
]


def _layer(module: str) -> int:
    found = [i for i, (_, _, inside) in enumerate(LAYERS) if inside(module)]
    assert found, f"{module} is in no layer: add it to LAYERS"
    return found[0]


def _upward(m: str, d: str) -> bool:
    """``m`` importing ``d`` goes up (a higher rank) or sideways (a sibling layer)."""
    (_, rank_m, _), (_, rank_d, _) = LAYERS[_layer(m)], LAYERS[_layer(d)]
    return rank_d > rank_m or (rank_d == rank_m and _layer(d) != _layer(m))


def test_every_module_has_a_layer():
    for m in import_graph():
        _layer(m)


def test_imports_point_down_the_layers():
    graph = import_graph()
    upward = sorted(
        f"{m} ({LAYERS[_layer(m)][0]}) imports {d} ({LAYERS[_layer(d)][0]})"
        for m, deps in graph.items()
        for d in deps
        if m != "tfrecord_io" and _upward(m, d)  # the package's lazy names reach up on purpose
    )
    assert not upward, "imports up the layers:\n  " + "\n  ".join(upward)


# Beam at module level only where Beam is the point: below the transforms, a module that
# imports Beam at the top would make the format core, the dataset layout or torch need it.
_BEAM_AT_TOP = _under(
    "tfrecord_io.beam",
    "tfrecord_io.transforms",
    "tfrecord_io.pipelines",
    "tfrecord_io.storage.storage_retry",  # bounds Beam's own retry loop in jobs; files imports it lazily
)


def test_beam_is_imported_at_module_level_only_by_beam_facing_modules():
    modules = _modules(ROOT)
    found = []
    for name, (path, _) in modules.items():
        if not path or _BEAM_AT_TOP(name):
            continue
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        for node in tree.body:
            targets = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            if any(t == "apache_beam" or t.startswith("apache_beam.") for t in targets):
                found.append(name)
    assert not found, "Beam imported at module level outside the Beam-facing layers: " + ", ".join(found)

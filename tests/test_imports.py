"""The package's import graph: no cycles, and the config layer imports no other hybridrl package.

Every import of a ``hybridrl`` module counts, wherever it is written (top of a module, inside a function,
under ``TYPE_CHECKING``), and importing a module from outside its package also runs the package's
``__init__``.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "hybridrl"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative import
                    anchor = name.split(".") if is_package else name.split(".")[:-1]
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    base = ".".join(anchor + ([base] if base else []))
                targets = [
                    f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names
                ]
            for target in targets:
                while target and target not in modules:  # `import hybridrl.x.y` -> the module itself
                    target = target.rpartition(".")[0]
                if target.startswith("hybridrl.") and target != name:
                    graph[name].add(target)
                    # Importing hybridrl.a.b from outside package a first runs a's __init__.
                    package = target.rpartition(".")[0]
                    while package not in ("hybridrl", name) and not name.startswith(package + "."):
                        if package in modules:  # a namespace package has no __init__ to run
                            graph[name].add(package)
                        package = package.rpartition(".")[0]
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_the_import_graph_has_no_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_config_imports_nothing_of_the_cluster_trainer_or_workers():
    graph = import_graph()
    upward = sorted(
        f"{src} -> {dst}"
        for src, targets in graph.items()
        if src.startswith("hybridrl.config")
        for dst in targets
        if dst.startswith(("hybridrl.cluster", "hybridrl.trainer", "hybridrl.workers", "hybridrl.observability"))
    )
    assert not upward, f"config must not know the layers above it: {upward}"


def test_the_graph_sees_imports_inside_functions(tmp_path):
    graph = import_graph()
    assert "hybridrl.trainer.job" in graph["hybridrl.trainer.main_ppo"]  # imported lazily in main()


def test_config_imports_no_domain_package():
    """config is schema, choices and loading: it imports only itself (the checks that need a domain package
    are hybridrl.preflight's, which stands above the domains and is never imported by config)."""
    graph = import_graph()
    config = sorted(name for name in graph if name == "hybridrl.config" or name.startswith("hybridrl.config."))
    assert "hybridrl.config.loader" in config and "hybridrl.config.compat.verl.keys" in config
    outside = sorted(
        f"{src} -> {dst}"
        for src in config
        for dst in graph[src]
        if dst != "hybridrl.config" and not dst.startswith("hybridrl.config.")
    )
    assert not outside, f"config must import no other hybridrl package: {outside}"
    reached, todo = set(config), list(config)  # everything config loads, directly or not
    while todo:
        for dst in graph[todo.pop()] - reached:
            reached.add(dst)
            todo.append(dst)
    preflight = sorted(name for name in reached if name.startswith("hybridrl.preflight"))
    assert not preflight, f"config must not import pre-flight, even through another module: {preflight}"


#: The package's rooms from the bottom up (docs/ARCHITECTURE.md "Rooms and what may import what"). A room
#: imports only itself and rooms of lower layers: rooms of one layer never import each other.
LAYERS: list[set[str]] = [
    {"protocol", "seeds", "logging_utils", "config"},
    {"algorithms", "data", "models", "rewards", "observability"},
    {"checkpoint", "tools"},
    {"engine"},
    {"generation"},
    {"workers"},
    {"cluster"},
    {"preflight"},
    {"planning"},
    {"trainer", "testing"},
    {"cli"},
]


def room(module: str) -> str:
    return module.split(".")[1] if module.count(".") else module


def test_every_room_has_a_layer():
    rooms = {room(name) for name in import_graph() if name != "hybridrl"}
    placed = set().union(*LAYERS)
    assert rooms == placed, (
        f"rooms without a layer: {sorted(rooms - placed)}; layers naming no room: {sorted(placed - rooms)}"
    )


def test_no_arrow_runs_back_up():
    layer = {name: i for i, rooms in enumerate(LAYERS) for name in rooms}
    upward = sorted(
        f"{src} -> {dst}"
        for src, targets in import_graph().items()
        if src != "hybridrl"
        for dst in targets
        if dst != "hybridrl" and room(src) != room(dst) and layer[room(dst)] >= layer[room(src)]
    )
    assert not upward, f"imports that run up or sideways between rooms: {upward}"


def test_one_place_defines_the_weights_version():
    """The version the hand-over to generation compares is assigned in the training engine only."""
    assigned = sorted(
        str(path.relative_to(PACKAGE.parent))
        for path in PACKAGE.rglob("*.py")
        if "weights_version =" in path.read_text() or "weights_version +=" in path.read_text()
    )
    assert assigned == ["hybridrl/engine/base.py"], assigned

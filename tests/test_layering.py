"""Dependencies flow one way (docs/architecture.md), no module reaches itself through others,
and modules share only public names.

The import graph (:func:`import_graph`): module A depends on module B when A's file has

- ``import B`` or ``from B import name`` anywhere: at the top, inside a function, or under
  ``if TYPE_CHECKING:`` (a type-only import still ties the two modules: the day it is needed
  at run time, or a checker follows it, the circle is there); relative imports are resolved
  against A's package;
- ``from P import name`` with P a package: B is ``P.name`` when that is a submodule, else P
  itself (``P/__init__.py``, which defines or re-exports ``name``);
- a lazy export table (``lazy_getattr(package, {name: module path}, ...)``): each module path
  in it, as the name loads it on first access.

A package's ``__init__``, which Python runs before any of its submodules, is not by itself an
edge: a package that re-exports its submodules is not a circle with them. A submodule that
takes a name from its own package's ``__init__`` (``from P import Name``, Name not a
submodule) is one, when that ``__init__`` imports the submodule. Only modules of rlcollect
are nodes.
"""
import ast
import importlib
from pathlib import Path

PACKAGE = Path(__file__).parents[1] / "rlcollect"
LOWER_LAYERS = ("envs", "buffers", "weight_sync", "logging", "modules")  # know nothing of collectors
# Circles that exist today and are fixed elsewhere, each as the set of its modules. The test
# fails when one of them is gone, so that its entry goes with the fix.
KNOWN_CIRCLES: list[set[str]] = []


def imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module, names) of every import in ``path``, ``import x`` giving (x, [])."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.append((node.module, [alias.name for alias in node.names]))
    return found


def modules(*parts: str):
    root = PACKAGE.joinpath(*parts)
    return sorted(root.rglob("*.py")) if root.is_dir() else [root.with_suffix(".py")]


def test_lower_layers_never_import_collectors_pipeline_or_hydra():
    for layer in LOWER_LAYERS:
        for path in modules(layer):
            for module, _ in imports(path):
                assert not module.startswith(("rlcollect.collectors", "rlcollect.pipeline", "rlcollect.cli")), \
                    f"{path.relative_to(PACKAGE)} imports {module}"
                assert not module.startswith(("hydra", "omegaconf")), f"{path.relative_to(PACKAGE)} imports {module}"


LEAF_MODULES = ("choices", "errors", "keys", "run_files", "seeding", "validation")


def test_leaf_modules_import_only_other_leaf_modules():
    leaves = {f"rlcollect.{name}" for name in LEAF_MODULES}
    for name in LEAF_MODULES:
        for module, _ in imports(PACKAGE / f"{name}.py"):
            assert not module.startswith("rlcollect") or module in leaves, f"{name}.py imports {module}"


def test_no_module_imports_another_modules_underscore_names():
    for path in sorted(PACKAGE.rglob("*.py")):
        for module, names in imports(path):
            if module.startswith("rlcollect"):
                private = [name for name in names if name.startswith("_")] + \
                          [part for part in module.split(".") if part.startswith("_")]
                assert not private, f"{path.relative_to(PACKAGE)} imports {private} from {module}"


def module_name(path: Path) -> str:
    """``rlcollect/x/y.py`` -> ``rlcollect.x.y``; ``rlcollect/x/__init__.py`` -> ``rlcollect.x``."""
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def lazy_export_modules(tree: ast.Module, name: str) -> list[str]:
    """The module paths of the ``lazy_getattr(package, exports, ...)`` tables in ``tree``, the
    module ``name`` (``exports`` a dict literal, the name of a module-level one, or a table
    built at import, as rlcollect's from its __init__.pyi: read from the package's
    ``__getattr__.exports``, the package imported)."""
    tables = {target.id: node.value for node in tree.body if isinstance(node, ast.Assign)
              for target in node.targets if isinstance(target, ast.Name) and isinstance(node.value, ast.Dict)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "lazy_getattr" and len(node.args) > 1:
            table = node.args[1]
            table = tables.get(table.id, table) if isinstance(table, ast.Name) else table
            if isinstance(table, ast.Dict):
                found += [value.value for value in table.values if isinstance(value, ast.Constant)]
            else:
                found += list(importlib.import_module(name).__getattr__.exports.values())
    return found


def import_graph() -> dict[str, set[str]]:
    """{module: the rlcollect modules it imports}, by the rule of this file's docstring."""
    paths = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}
    graph = {}
    for name, path in paths.items():
        tree = ast.parse(path.read_text())
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets = set(lazy_export_modules(tree, name))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module
                targets |= {f"{source}.{alias.name}" if f"{source}.{alias.name}" in paths else source
                            for alias in node.names}
        graph[name] = {target for target in targets if target in paths}
    return graph


def circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module, and the modules that import
    themselves: the modules that reach themselves through others (Tarjan's algorithm, iterative)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            module, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[module] = min(low[module], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[module])
            if low[module] == index[module]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == module:
                        break
                if len(component) > 1 or module in graph[module]:
                    found.append(component)
    return found


def cycle_through(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A shortest cycle from the component's first module back to it, inside the component."""
    start = min(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        next_frontier = []
        for module in frontier:
            for child in sorted(graph[module] & component):
                if child == start:
                    return paths[module] + [start]
                if child not in paths:
                    paths[child] = paths[module] + [child]
                    next_frontier.append(child)
        frontier = next_frontier
    raise AssertionError(f"no cycle through {start}")  # a component always has one


def test_import_graph_follows_the_rule_of_the_docstring():
    graph = import_graph()
    assert "rlcollect.weight_sync.strategies" in graph["rlcollect.weight_sync.pipes"]  # from package import submodule
    assert "rlcollect.weight_sync" not in graph["rlcollect.weight_sync.pipes"]
    assert "rlcollect.weight_sync.ray" in graph["rlcollect.weight_sync"]  # a lazy export
    assert "rlcollect.collectors.ray" in graph["rlcollect"]  # TYPE_CHECKING import of a package's re-export
    assert "rlcollect.pipeline.lifecycle" in graph["rlcollect.pipeline.loop"]  # TYPE_CHECKING, inside the package
    graph = {"a": {"b", "c"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}}
    assert circles(graph) == [{"a", "b", "c"}, {"e"}]
    assert cycle_through(graph, {"a", "b", "c"}) == ["a", "c", "a"]


def test_no_module_reaches_itself_through_others():
    graph = import_graph()
    found = circles(graph)
    new = [f"{' -> '.join(cycle_through(graph, component))} (the circle holds {', '.join(sorted(component))})"
           for component in found if component not in KNOWN_CIRCLES]
    assert not new, "import circles:\n" + "\n".join(new)
    gone = [sorted(known) for known in KNOWN_CIRCLES if known not in found]
    assert not gone, f"these circles are gone: remove them from KNOWN_CIRCLES: {gone}"


def test_run_records_import_nothing_of_the_compare_tool():
    graph = import_graph()
    for module in sorted(graph):
        if module.startswith("rlcollect.logging"):
            tool = sorted(target for target in graph[module] if target.startswith("rlcollect.analysis"))
            assert not tool, f"{module} imports {tool}"
        if module.startswith("rlcollect.analysis"):
            # run records below it, nothing else of rlcollect but the deprecation mechanism (a module left
            # behind where a module moved: rlcollect.moved imports nothing of rlcollect until a name is read)
            # and how every command writes its output files (rlcollect.outputs: written whole, folders made
            # and removed again on failure; it imports the errors and the run-file names alone)
            allowed = ("rlcollect.analysis", "rlcollect.logging", "rlcollect.moved", "rlcollect.outputs",
                       "rlcollect.errors")
            others = sorted(target for target in graph[module] if not target.startswith(allowed))
            assert not others, f"{module} imports {others}"


def test_collectors_import_nothing_of_the_policy_modules():
    """Collectors carry a recurrent policy's state through the primer protocol
    (rlcollect/primers.py), which the policy modules implement: neither knows the other."""
    graph = import_graph()
    for module in sorted(graph):
        if module.startswith("rlcollect.collectors"):
            policies = sorted(target for target in graph[module] if target.startswith("rlcollect.modules"))
            assert not policies, f"{module} imports {policies}"


def test_the_pipeline_names_no_concrete_collector_or_learner_class():
    """The pipeline builds every collector and learner through its contract: no class of
    rlcollect's collectors or learners is named in its code (comments aside)."""
    import rlcollect
    from rlcollect.algos.learners import Learner
    from rlcollect.collectors.base import CollectorBase

    concrete = {name for name in rlcollect.__all__ if isinstance(getattr(rlcollect, name), type)
                and issubclass(getattr(rlcollect, name), (CollectorBase, Learner))
                and getattr(rlcollect, name) not in (CollectorBase, Learner)}
    assert {"Collector", "MultiSyncCollector", "RayCollector", "PoolCollector"} <= concrete
    for path in modules("pipeline"):
        tree = ast.parse(path.read_text())
        named = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
        named |= {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
        named |= {alias.asname or alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                  for alias in node.names}
        assert not named & concrete, f"{path.relative_to(PACKAGE)} names {sorted(named & concrete)}"


def test_the_batched_sweeps_import_nothing_of_the_commands():
    """commands/ (the Hydra task, hydra/launcher=batched) builds and drives sweeps/; sweeps/
    never imports commands/ back (the two packages were a loop)."""
    for path in modules("sweeps"):
        for module, _ in imports(path):
            assert not module.startswith("rlcollect.commands"), f"{path.relative_to(PACKAGE)} imports {module}"

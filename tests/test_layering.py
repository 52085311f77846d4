"""Dependencies flow one way (docs/architecture.md) and modules share only public names."""
import ast
from pathlib import Path

PACKAGE = Path(__file__).parents[1] / "rlcollect"
LOWER_LAYERS = ("envs", "buffers", "weight_sync", "logging", "modules")  # know nothing of collectors


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


LEAF_MODULES = ("errors", "keys", "seeding", "validation")


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

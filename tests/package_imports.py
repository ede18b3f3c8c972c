"""Reading the package's imports from its source, for the layout and boundary tests.

Every import counts: at the top of a module, under ``if TYPE_CHECKING:``, and inside a
function (a lazy import is still a dependency; it only hides it from the import system).
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"
PACKAGE = "resolvent"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted((SRC / PACKAGE).rglob("*.py"))}


def imports_of(name: str, tree: ast.AST, is_package: bool, known: set[str]) -> set[str]:
    """The package's modules that *name* imports, wherever in its *tree* it imports them."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                module = ".".join([*base, *(node.module.split(".") if node.module else [])])
            else:
                module = node.module or ""
            # `from pkg import sub` imports the submodule `pkg.sub` when there is one;
            # it depends on `pkg` itself only for the names that are not submodules
            subs = [f"{module}.{alias.name}" for alias in node.names]
            targets = [s if s in known else module for s in subs]
        else:
            continue
        for target in targets:
            while target and target not in known:  # `import a.b.c` depends on a.b.c
                target = target.rpartition(".")[0]
            if target and target != name and target.startswith(PACKAGE):
                found.add(target)
    return found


def trees() -> dict[str, tuple[ast.AST, bool]]:
    """Each module's parsed source, and whether it is a package's ``__init__``."""
    return {
        name: (ast.parse(path.read_text(encoding="utf-8")), path.name == "__init__.py")
        for name, path in modules().items()
    }


def import_graph() -> dict[str, set[str]]:
    parsed = trees()
    known = set(parsed)
    return {name: imports_of(name, tree, pkg, known) for name, (tree, pkg) in parsed.items()}

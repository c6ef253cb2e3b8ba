"""Each room's doors: other rooms import only the modules its `__init__.py` lists in `__all__`.

A room (a package in `.importlinter`'s root_packages, via tests/rooms.py) declares its
doors in `__all__`; a sub-package on the way to a door declares its own (`promotion`
lists `decision`, `promotion.decision` lists `gate`, ...). A module of one room may import
another room's package, its doors, and names the package itself lists; anything else is a
violation naming the importer's file:line and the module it reached (design §3, "Rooms and
their doors").

Importers checked: every room's modules, `examples/` (model repos: what a team's
`train.py` may take from `modelkit`) and `scripts/` (the docs build reads
`mlops.reference`). Not checked: `tests/` and `benchmarks/`, which take a room apart on
purpose to test or measure one part (`promotion.decision.analysis`, `serving.quality`),
which is not what the room offers. Imports named in strings (`importlib`, the steps'
`STEPS` table) are not seen; the modules they name are doors anyway.

The walk is `ast` only: no room is imported, so the check stays fast and cannot be fooled
by an import's side effects. It was checked once against the real tree with a deliberate
violation (`from promotion.decision import analysis` added to workflows/comparison.py):
`test_other_rooms_use_only_the_doors` failed naming `workflows/comparison.py:25` and
`promotion.decision.analysis` (and on the tree before the doors were declared, it named
all 373 cross-room imports); `test_a_violation_is_named` keeps that check in the suite
on a tree of its own.

import-linter could say part of this (a `protected` contract per room, listing each
non-door module), but that is a second list of every room's modules to keep beside
`__all__`; this test reads the one list the rooms declare.
"""

from __future__ import annotations

import ast
import pathlib
from collections.abc import Iterator

from tests.rooms import ROOMS

ROOT = pathlib.Path(__file__).resolve().parents[1]
#: Directories outside the rooms whose Python files are checked as importers.
OUTSIDE_IMPORTERS = ("examples", "scripts")
#: Doors declared before their module exists: `promotion.errors` (the room's exceptions in
#: one module) lands from a parallel branch. Remove an entry once its module is on main.
PENDING = {"promotion.errors"}


class Tree:
    """The rooms of one checkout, read with `ast`: their modules and declared doors."""

    def __init__(self, root: pathlib.Path, rooms: tuple[str, ...]) -> None:
        self.root = root
        self.rooms = rooms
        self._doors: dict[str, tuple[str, ...] | None] = {}

    def path_of(self, module: str) -> pathlib.Path:
        return self.root.joinpath(*module.split("."))

    def is_package(self, module: str) -> bool:
        return (self.path_of(module) / "__init__.py").is_file()

    def is_module(self, module: str) -> bool:
        return self.is_package(module) or self.path_of(module).with_suffix(".py").is_file()

    def doors(self, package: str) -> tuple[str, ...] | None:
        """The package's `__all__` (a literal list or tuple of strings), or None."""
        if package not in self._doors:
            init = self.path_of(package) / "__init__.py"
            self._doors[package] = _literal_all(ast.parse(init.read_text(), str(init)))
        return self._doors[package]

    def importers(self, outside: tuple[str, ...] = ()) -> Iterator[pathlib.Path]:
        for top in (*self.rooms, *outside):
            yield from sorted((self.root / top).rglob("*.py"))

    def module_of(self, path: pathlib.Path) -> tuple[str, bool]:
        """A room file's dotted name, and whether it is a package's `__init__`."""
        parts = list(path.relative_to(self.root).with_suffix("").parts)
        is_init = parts[-1] == "__init__"
        return ".".join(parts[:-1] if is_init else parts), is_init

    def reached(self, node: ast.Import | ast.ImportFrom, path: pathlib.Path,
                ) -> Iterator[tuple[str, str | None]]:
        """(module, name) pairs an import statement reaches; name None for a module."""
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, None
            return
        base = node.module or ""
        if node.level:  # relative: only inside a room, resolved against the importer
            module, is_init = self.module_of(path)
            package = module.split(".") if is_init else module.split(".")[:-1]
            package = package[:len(package) - node.level + 1]
            base = ".".join([*package, base] if base else package)
        for alias in node.names:
            sub = f"{base}.{alias.name}"
            yield (sub, None) if self.is_module(sub) else (base, alias.name)

    def problem(self, module: str, name: str | None) -> str | None:
        """Why importing `module` (and `name` from it) from another room is not allowed."""
        parts = module.split(".")
        for i in range(1, len(parts)):
            package, door = ".".join(parts[:i]), parts[i]
            doors = self.doors(package) if self.is_package(package) else None
            if doors is None:
                return f"{package} declares no doors (no __all__ in its __init__.py)"
            if door not in doors:
                return f"{'.'.join(parts[:i + 1])} is not a door of {package} (its __all__)"
        if name is not None and self.is_package(module):
            doors = self.doors(module)
            if doors is not None and name not in doors:
                return f"{module}.{name} is not a door of {module} (its __all__)"
        return None

    def violations(self, outside: tuple[str, ...] = ()) -> list[str]:
        """Every import of another room's non-door, as `file:line: why`."""
        found: set[tuple[str, int, str]] = set()
        for path in self.importers(outside):
            rel = path.relative_to(self.root)
            tree = ast.parse(path.read_text(), str(path))
            for node in ast.walk(tree):
                if not isinstance(node, (ast.Import, ast.ImportFrom)):
                    continue
                for module, name in self.reached(node, path):
                    room = module.split(".")[0]
                    if room not in self.rooms or room == rel.parts[0]:
                        continue
                    why = self.problem(module, name)
                    if why:
                        found.add((str(rel), node.lineno, f"imports {module}: {why}"))
        return [f"{file}:{line}: {why}" for file, line, why in sorted(found)]


def _literal_all(tree: ast.Module) -> tuple[str, ...] | None:
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value_node = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value_node = node.target, node.value
        else:
            continue
        if isinstance(target, ast.Name) and target.id == "__all__":
            value = ast.literal_eval(value_node)
            assert isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)
            return tuple(value)
    return None


def _bound_names(tree: ast.Module) -> set[str]:
    """Names an `__init__.py` binds at its top level (defs, classes, assignments, imports)."""
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


TREE = Tree(ROOT, ROOMS)


def test_other_rooms_use_only_the_doors():
    problems = TREE.violations(OUTSIDE_IMPORTERS)
    assert not problems, (
        "imports of another room's module that is not one of its doors; import a door, or "
        "add the module to the room's __all__ with a comment saying why:\n"
        + "\n".join(problems))


def test_every_room_says_what_it_offers():
    for room in ROOMS:
        tree = ast.parse((ROOT / room / "__init__.py").read_text())
        assert ast.get_docstring(tree), f"{room}/__init__.py: no docstring"
        assert _literal_all(tree) is not None, f"{room}/__init__.py: no __all__ (its doors)"


def test_every_door_is_there():
    """Each name in a package's `__all__` is a module of it or a name its `__init__` binds."""
    missing = []
    for init in sorted(p for room in ROOMS for p in (ROOT / room).rglob("__init__.py")):
        package, _ = TREE.module_of(init)
        doors = TREE.doors(package)
        bound = _bound_names(ast.parse(init.read_text()))
        missing += [f"{package}.{door}" for door in doors or ()
                    if door not in bound and not TREE.is_module(f"{package}.{door}")
                    and f"{package}.{door}" not in PENDING]
    assert not missing, f"doors that lead nowhere: {missing}"


def test_a_violation_is_named(tmp_path):
    """The check itself: on a tree of two rooms, a non-door import is named by file and line,
    a door (module, sub-package door, or a name the package lists) is not."""
    files = {
        "low/__init__.py": '__all__ = ["api", "sub", "NAME"]\nNAME = 1\nHIDDEN = 2\n',
        "low/api.py": "",
        "low/inner.py": "",
        "low/sub/__init__.py": '__all__ = ["door"]\n',
        "low/sub/door.py": "",
        "low/sub/hall.py": "",
        "low/bare/__init__.py": "",
        "low/bare/thing.py": "",
        "high/__init__.py": "__all__ = []\n",
        "high/use.py": (
            "import low.api\n"
            "from low import api, NAME\n"
            "from low.sub import door\n"
            "from low.inner import x\n"        # line 4: not a door
            "def f():\n"
            "    import low.sub.hall\n"         # line 6: in a function, not a door
            "from low import HIDDEN\n"          # line 7: a name the package does not list
            "from . import more\n"              # a relative import stays in its room
        ),
        "high/more.py": "from low.bare import thing\n",  # low.bare is not a door
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    found = Tree(tmp_path, ("high", "low")).violations()
    assert found == [
        "high/more.py:1: imports low.bare.thing: low.bare is not a door of low (its __all__)",
        "high/use.py:4: imports low.inner: low.inner is not a door of low (its __all__)",
        "high/use.py:6: imports low.sub.hall: low.sub.hall is not a door of low.sub (its __all__)",
        "high/use.py:7: imports low: low.HIDDEN is not a door of low (its __all__)",
    ]

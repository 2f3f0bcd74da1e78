"""The layer order, read off every module's imports (those inside functions too).

errors < runtime < ir < ops < {passes, packager, importers}: a package imports
only from the layers below it. ``ir`` knows ops only through the registry
protocol it defines (ir/op.py); ``passes`` never reach into the packager (a
later stage); the compiler's packages use the runtime's public modules
only, never a private ``_name`` module of it. The pass infrastructure
(``passes/core/``) imports no pass.
"""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "relaxpack"

#: package -> the packages it may import from (besides itself, errors and the root)
ALLOWED = {
    "runtime": set(),
    "ir": set(),
    "ops": {"ir", "runtime"},
    "passes": {"ir", "ops", "runtime"},
    "packager": {"ir", "ops", "runtime"},
    "importers": {"ir", "ops", "runtime"},
}
#: packages that may use only the runtime's public modules
NO_PRIVATE_RUNTIME = ("ops", "passes", "packager", "importers")


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_module(name: str) -> bool:
    path = PACKAGE.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def imports(path: Path) -> set[str]:
    """The relaxpack modules ``path`` imports, anywhere in the file; ``from p
    import m`` counts as ``p.m`` when ``m`` is a module."""
    package = module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.add(sub if is_module(sub) else target)
    return {m for m in found if m == "relaxpack" or m.startswith("relaxpack.")}


def layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def violations(path: Path) -> list[str]:
    source = layer(module_name(path))
    allowed = ALLOWED[source] | {source, "errors", ""}
    bad = []
    for target in sorted(imports(path)):
        target_layer = layer(target)
        if target_layer in ALLOWED and target_layer not in allowed:
            bad.append(target)
        elif (source in NO_PRIVATE_RUNTIME and target_layer == "runtime"
              and any(part.startswith("_") for part in target.split(".")[2:])):
            bad.append(target)
    return bad


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_layer_imports_only_from_below(package):
    files = sorted((PACKAGE / package).rglob("*.py"))
    assert files
    found = {module_name(p): violations(p) for p in files}
    assert {m: bad for m, bad in found.items() if bad} == {}


def test_pass_infrastructure_imports_no_pass():
    for path in sorted((PACKAGE / "passes" / "core").rglob("*.py")):
        passes = {m for m in imports(path)
                  if m.startswith("relaxpack.passes.") and not m.startswith("relaxpack.passes.core")}
        assert not passes, f"{module_name(path)} imports {passes}"


def test_the_checker_sees_imports_inside_functions(tmp_path, monkeypatch):
    # a module of ir/ that imports the ops inside a function, relatively
    fake = tmp_path / "relaxpack" / "ir"
    fake.mkdir(parents=True)
    (tmp_path / "relaxpack" / "ops").mkdir()
    (tmp_path / "relaxpack" / "ops" / "__init__.py").write_text("")
    (tmp_path / "relaxpack" / "ops" / "registry.py").write_text("")
    (fake / "builder.py").write_text("def f():\n    from ..ops.registry import get_op_def\n")
    (fake / "ok.py").write_text("from .. import OP_LIBRARIES\nfrom ..errors import IRError\n")
    monkeypatch.setitem(globals(), "PACKAGE", tmp_path / "relaxpack")
    assert violations(fake / "builder.py") == ["relaxpack.ops.registry"]
    assert violations(fake / "ok.py") == []


def test_private_runtime_modules_are_refused_to_ops(tmp_path, monkeypatch):
    monkeypatch.setitem(globals(), "PACKAGE", tmp_path / "relaxpack")
    kernels = tmp_path / "relaxpack" / "runtime" / "kernels"
    kernels.mkdir(parents=True)
    (kernels / "__init__.py").write_text("")
    (kernels / "_math.py").write_text("")
    ops = tmp_path / "relaxpack" / "ops"
    ops.mkdir()
    (ops / "index.py").write_text("from ..runtime.kernels._math import onnx_slice\n"
                                  "from ..runtime.kernels import _math\n")
    assert violations(ops / "index.py") == ["relaxpack.runtime.kernels._math"]

"""The package's boundaries: cheap import, and who may import what."""

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "relaxpack"


def run_python(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_import_relaxpack_is_cheap():
    # best of three, in fresh interpreters: no onnx, no op tables, no heavy work at import
    code = ("import sys, time; t = time.perf_counter(); import relaxpack; "
            "print(time.perf_counter() - t); "
            "print(','.join(m for m in ('onnx', 'onnxruntime', 'typer', 'relaxpack.ops') if m in sys.modules))")
    results = [run_python(code).splitlines() for _ in range(3)]
    assert min(float(r[0]) for r in results) < 0.5
    assert all(len(r) == 1 or r[1] == "" for r in results), results


def test_runtime_imports_only_numpy_and_stdlib():
    code = ("import sys; before = set(sys.modules); import relaxpack.runtime; "
            "print(' '.join(sorted(set(sys.modules) - before)))")
    loaded = run_python(code).split()
    third_party = {m.split(".")[0] for m in loaded} - set(sys.stdlib_module_names) - {"numpy", "relaxpack"}
    assert not third_party, f"relaxpack.runtime pulled in {sorted(third_party)}"
    ours = {m for m in loaded if m.startswith("relaxpack.")}
    assert all(m.startswith("relaxpack.runtime") or m == "relaxpack.errors" for m in ours), ours


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the file's package
                package = path.relative_to(PACKAGE.parent).with_suffix("").parts[:-1]
                base = package[: len(package) - node.level + 1]
                names.add(".".join(base + ((node.module,) if node.module else ())))
            else:
                names.add(node.module)
    return names


def test_only_importers_and_check_import_onnx():
    """check_isolated.py is check's onnxruntime in a child process."""
    allowed = ("importers", "check.py", "check_isolated.py", "backend.py", "examples")
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.startswith(allowed):
            continue
        bad = {m for m in imported_modules(path) if m.split(".")[0] in ("onnx", "onnxruntime")}
        assert not bad, f"{rel} imports {bad}"


def test_runtime_never_imports_compiler_parts():
    for path in (PACKAGE / "runtime").rglob("*.py"):
        bad = {m for m in imported_modules(path)
               if m.startswith(("relaxpack.passes", "relaxpack.importers", "relaxpack.ir", "relaxpack.ops"))}
        assert not bad, f"{path.name} imports {bad}"

"""The kernel table imports kernel modules lazily (issue 18, cold start): ``import
relaxpack.runtime`` imports none, a loaded archive those of its kernels; the owner index the
table follows is the registrations' own."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np

import relaxpack
from relaxpack.runtime.kernels import KERNELS, _index
from relaxpack.runtime.kernels._registry import ORIGIN


def test_the_owner_index_is_what_the_modules_register():
    owners = _index.owners()      # (kernels other tests register come from outside the package)
    assert owners == _index.OWNER, "regenerate with python -m relaxpack.runtime.kernels._index"
    assert set(owners) <= set(KERNELS) == set(ORIGIN)
    assert all(ORIGIN[name].startswith("relaxpack.runtime.kernels.") == (name in owners) for name in ORIGIN)


def _kernel_modules_after(code: str) -> list[str]:
    script = code + ("\nimport json, sys\n"
                     "print(json.dumps(sorted(m for m in sys.modules if m.startswith('relaxpack.runtime.kernels.'))))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.splitlines()[-1])


def test_importing_the_runtime_imports_no_kernel_module():
    loaded = _kernel_modules_after("import relaxpack.runtime")
    assert loaded == ["relaxpack.runtime.kernels._index", "relaxpack.runtime.kernels._registry"]


def test_an_archive_imports_the_modules_of_its_kernels_and_runs(tmp_path):
    from relaxpack.ir import BlockBuilder, TensorStructInfo, Var
    from relaxpack.ops import make_call
    x = Var("x", TensorStructInfo((3,), "float32"))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            gv = bb.emit_output(make_call("nn.relu", x), "y")
        bb.emit_func_output(gv)
    path = tmp_path / "relu.rpk"
    relaxpack.build(bb.get(), opt_level=0).save(path)
    loaded = _kernel_modules_after(
        "import numpy as np\nfrom relaxpack.runtime import VirtualMachine, load\n"
        f"vm = VirtualMachine(load({str(path)!r}))\n"
        "assert (vm.run({'x': np.array([-1, 0, 2], np.float32)})['y'] == [0, 0, 2]).all()")
    assert "relaxpack.runtime.kernels.activation" in loaded
    assert not {"relaxpack.runtime.kernels.tree_ensemble", "relaxpack.runtime.kernels.image_decode",
                "relaxpack.runtime.kernels.recurrent", "relaxpack.runtime.kernels.tokenizer"} & set(loaded)


def test_lookups_of_unknown_names_and_iteration():
    assert KERNELS.get("no_such_kernel") is None and "no_such_kernel" not in KERNELS
    assert len(KERNELS) == len(list(KERNELS)) == len(dict(KERNELS.items())) >= 200
    assert KERNELS["add"] is KERNELS.get("add")

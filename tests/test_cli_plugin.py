"""``--plugin``: custom converters and functions for the command line.

A plugin file registers the converter (for ``convert``) and the function
(for ``run``); without it, ``run`` fails with one line that names the
missing function and the way to register it.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import onnx

from relaxpack.examples.custom_op import make_model

PLUGIN = textwrap.dedent('''
    import numpy as np
    from relaxpack.runtime import register_func

    try:                                   # build side: only where onnx is around
        from relaxpack.importers.onnx import call_registered, register_converter
    except ImportError:
        register_converter = None

    if register_converter is not None:
        @register_converter("acme", "RowNorm", since_opset=1)
        def convert_row_norm(ctx, x, *, eps=1e-5):
            return call_registered(ctx, "acme.row_norm", [x], (x.shape, x.dtype), dps=True, eps=eps)

    @register_func("acme.row_norm", dps=True)
    def row_norm(x, *, eps, out):
        np.divide(x, np.sqrt(np.sum(x * x, axis=-1, keepdims=True) + eps), out=out)
''')


def _cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "relaxpack.cli", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


def test_a_plugin_file_registers_the_converter_and_the_function(tmp_path):
    plugin, model, archive = tmp_path / "acme_plugin.py", tmp_path / "m.onnx", tmp_path / "m.rpk"
    plugin.write_text(PLUGIN)
    onnx.save(make_model(), str(model))
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)

    without = _cli("convert", model, "-o", archive, cwd=tmp_path)
    assert without.returncode == 1 and "RowNorm" in without.stderr and len(without.stderr.strip().splitlines()) == 1

    converted = _cli("convert", model, "-o", archive, "--dim", "batch=1..8", "--plugin", plugin, cwd=tmp_path)
    assert converted.returncode == 0, converted.stderr

    missing = _cli("run", archive, "--input", f"x={tmp_path / 'x.npy'}", cwd=tmp_path)
    assert missing.returncode == 1
    line, = missing.stderr.strip().splitlines()
    assert "acme.row_norm" in line and "--plugin" in line

    ran = _cli("run", archive, "--input", f"x={tmp_path / 'x.npy'}", "--plugin", plugin,
               "--output", tmp_path / "y.npz", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    h = x @ onnx.numpy_helper.to_array(make_model().graph.initializer[0])
    np.testing.assert_allclose(np.load(tmp_path / "y.npz")["y"], h / np.sqrt((h * h).sum(-1, keepdims=True) + 1e-6),
                               rtol=1e-5)


def test_a_plugin_that_fails_to_import_is_one_line(tmp_path):
    broken = tmp_path / "broken.py"
    broken.write_text("raise RuntimeError('boom')\n")
    for args in (["run", tmp_path / "none.rpk", "--plugin", broken],
                 ["run", tmp_path / "none.rpk", "--plugin", "no_such_module_xyz"]):
        proc = _cli(*args, cwd=tmp_path)
        assert proc.returncode == 1
        line, = proc.stderr.strip().splitlines()
        assert "cannot load plugin" in line

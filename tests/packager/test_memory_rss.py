"""A planned build's run peaks lower in resident memory than an unplanned one."""

import subprocess
import sys

import onnx

MODEL = onnx.__path__[0] + "/backend/test/data/light/light_densenet121.onnx"

SCRIPT = """
import resource, sys
import numpy as np
import relaxpack
from relaxpack.runtime import VirtualMachine
exe = relaxpack.build(relaxpack.from_onnx(sys.argv[1]), plan_memory=sys.argv[2] == "1")
vm = VirtualMachine(exe)
x = np.zeros((1, 3, 224, 224), np.float32)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
vm.run({exe.input_names()[0]: x})
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(after - before)
"""


def peak_growth_kib(planned: bool) -> int:
    out = subprocess.run([sys.executable, "-c", SCRIPT, MODEL, "1" if planned else "0"],
                         capture_output=True, text=True, check=True)
    return int(out.stdout.split()[-1])


def test_planned_run_peaks_lower_than_unplanned():
    planned, unplanned = peak_growth_kib(True), peak_growth_kib(False)
    # densenet121's intermediates total ~9x its planned arena (~39 MB)
    assert planned < unplanned / 2, (planned, unplanned)

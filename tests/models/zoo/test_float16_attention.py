"""The zoo's float16 transformers whose attention sits between float16 products (GPT-2's split
projections, ViT's merged ones) run it as one float32 ``nn.attention`` per layer, with no float16
array between their products: RoundFloat16InFloat32 keeps the model's roundings in float32, then
FuseAttention fuses. A guard against an export or a pass that unfuses it again; the values are
test_zoo's (every shape against onnxruntime) and test_float16_contract's (bit for bit the unfused
program)."""

from __future__ import annotations

import pytest

import relaxpack

from .judge import HERE


def _calls(exe, kernel: str) -> int:
    return sum(f'R.call_tir("{kernel}"' in line for line in exe.metadata["ir"].splitlines())


@pytest.mark.parametrize("name, layers", [("gpt2_dynamo_fp16", 2), ("vit_fp16", 2)])
def test_float16_attention_runs_fused_in_float32(name, layers):
    exe = relaxpack.build(relaxpack.from_onnx(str(HERE / f"{name}.onnx")), opt_level=2)
    assert _calls(exe, "nn.attention") == layers
    assert _calls(exe, "nn.softmax") == _calls(exe, "nn.safe_softmax") == 0
    assert "permute_matmul" not in exe.kernel_names

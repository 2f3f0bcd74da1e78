"""Export the torch models the tests use (random weights, seeded).

    python -m tests.models.generate          # needs torch; writes tests/models/*.onnx

CI needs no torch: the exported files (each well under 2 MB) are committed.
- resnet_small.onnx: a ResNet with BasicBlocks and batch norm; dynamic batch.
- gpt_small.onnx: a GPT-style decoder (token + position embeddings, causal
  self-attention, GELU MLP, layer norm); dynamic batch and sequence.
- bert_small.onnx: a 2-layer BERT encoder written as Hugging Face writes it
  (onnxruntime's transformer optimizer fuses it into com.microsoft ops);
  dynamic batch and sequence.
- gru_small.onnx, lstm_small.onnx: torch.nn.GRU / torch.nn.LSTM, 2 layers,
  bidirectional, batch_first, then a linear head; outputs the head and the
  final states; dynamic batch and sequence.
- cond_small.onnx: ``torch.cond`` on the sign of the input's sum (an ONNX If),
  exported by torch's dynamo exporter (which needs onnxscript); dynamic batch.
- if_small.onnx, loop_small.onnx: a data-dependent Python ``if`` and a
  ``for`` loop of run-time length, kept by ``torch.jit.script`` (an ONNX If
  and Loop) and exported by the TorchScript exporter; dynamic batch.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from torch import nn

HERE = Path(__file__).resolve().parent


class BasicBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.down = None
        if stride != 1 or c_in != c_out:
            self.down = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return torch.relu(y + (x if self.down is None else self.down(x)))


class ResNetSmall(nn.Module):
    def __init__(self, classes: int = 10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
                                  nn.MaxPool2d(2))
        self.layers = nn.Sequential(BasicBlock(16, 16, 1), BasicBlock(16, 32, 2), BasicBlock(32, 64, 2))
        self.head = nn.Linear(64, classes)

    def forward(self, x):
        y = self.layers(self.stem(x))
        return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(y, 1), 1))


class Block(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.reshape(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / (d // self.heads) ** 0.5
        mask = torch.ones(t, t, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.mlp(self.ln2(x))


class GPTSmall(nn.Module):
    def __init__(self, vocab: int = 128, d: int = 32, heads: int = 4, layers: int = 2, max_len: int = 128):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(max_len, d)
        self.blocks = nn.Sequential(*[Block(d, heads) for _ in range(layers)])
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)

    def forward(self, ids):
        t = ids.shape[1]
        x = self.tok(ids) + self.pos(torch.arange(t, device=ids.device))
        return self.head(self.ln(self.blocks(x)))


class RecurrentSmall(nn.Module):
    """A 2-layer bidirectional batch-first GRU or LSTM and a linear head."""

    def __init__(self, cell: type[nn.Module], features: int = 8, hidden: int = 12, classes: int = 5):
        super().__init__()
        self.rnn = cell(features, hidden, num_layers=2, bidirectional=True, batch_first=True)
        self.head = nn.Linear(2 * hidden, classes)

    def forward(self, x):
        y, state = self.rnn(x)
        return (self.head(y),) + (state if isinstance(state, tuple) else (state,))


class BertSelfAttention(nn.Module):
    """Hugging Face BERT's self-attention, op for op (what onnxruntime's optimizer fuses)."""

    def __init__(self, d, heads):
        super().__init__()
        self.heads, self.dh = heads, d // heads
        self.query, self.key, self.value = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)

    def split(self, x):
        b, t, _ = x.shape
        return x.view(b, t, self.heads, self.dh).permute(0, 2, 1, 3)

    def forward(self, x, mask):
        q, k, v = self.split(self.query(x)), self.split(self.key(x)), self.split(self.value(x))
        s = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.dh) + mask
        c = torch.matmul(s.softmax(-1), v).permute(0, 2, 1, 3).contiguous()
        return c.view(c.shape[0], c.shape[1], -1)


class BertLayer(nn.Module):
    """Attention, then the feed-forward block, each followed by a residual LayerNorm (post-LN)."""

    def __init__(self, d, heads, ff):
        super().__init__()
        self.attn, self.attn_out, self.ln1 = BertSelfAttention(d, heads), nn.Linear(d, d), nn.LayerNorm(d, eps=1e-12)
        self.inter, self.out, self.ln2 = nn.Linear(d, ff), nn.Linear(ff, d), nn.LayerNorm(d, eps=1e-12)

    def forward(self, x, mask):
        x = self.ln1(self.attn_out(self.attn(x, mask)) + x)
        return self.ln2(self.out(nn.functional.gelu(self.inter(x))) + x)


class BertSmall(nn.Module):
    """A 2-layer BERT encoder as Hugging Face writes it: embeddings with token types and a
    position buffer, post-LN layers with erf GELU, an additive padding mask, a tanh pooler."""

    def __init__(self, vocab=100, d=32, heads=4, ff=64, layers=2, max_pos=64):
        super().__init__()
        self.word, self.pos, self.token_type = nn.Embedding(vocab, d), nn.Embedding(max_pos, d), nn.Embedding(2, d)
        self.ln = nn.LayerNorm(d, eps=1e-12)
        self.register_buffer("position_ids", torch.arange(max_pos).expand((1, -1)))
        self.layers = nn.ModuleList([BertLayer(d, heads, ff) for _ in range(layers)])
        self.pool = nn.Linear(d, d)

    def forward(self, input_ids, attention_mask, token_type_ids):
        t = input_ids.shape[1]
        x = self.word(input_ids) + self.token_type(token_type_ids) + self.pos(self.position_ids[:, :t])
        x = self.ln(x)
        mask = (1.0 - attention_mask[:, None, None, :].to(torch.float32)) * torch.finfo(torch.float32).min
        for layer in self.layers:
            x = layer(x, mask)
        return x, torch.tanh(self.pool(x[:, 0]))


def _randomize_batch_norm(model: nn.Module, gen: torch.Generator) -> None:
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.copy_(0.1 * torch.randn(m.num_features, generator=gen))
            m.running_var.copy_(1 + 0.1 * torch.rand(m.num_features, generator=gen))


def export(model: nn.Module, example, path: Path, input_name: str, output_name: str, dynamic_axes) -> None:
    model.eval()
    torch.onnx.export(model, (example,), str(path), input_names=[input_name], output_names=[output_name],
                      dynamic_axes=dynamic_axes, opset_version=17, dynamo=False)
    print(f"wrote {path} ({path.stat().st_size / 1e6:.2f} MB)")


def main() -> None:
    gen = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    resnet = ResNetSmall()
    _randomize_batch_norm(resnet, gen)
    export(resnet, torch.randn(2, 3, 32, 32), HERE / "resnet_small.onnx", "input", "logits",
           {"input": {0: "batch"}, "logits": {0: "batch"}})
    gpt = GPTSmall()
    export(gpt, torch.randint(0, 128, (2, 16)), HERE / "gpt_small.onnx", "ids", "logits",
           {"ids": {0: "batch", 1: "seq"}, "logits": {0: "batch", 1: "seq"}})
    main_recurrent()
    main_bert()
    main_control()


def main_bert() -> None:
    """bert_small.onnx: inputs input_ids, attention_mask, token_type_ids (batch, seq), int64;
    outputs last_hidden_state (batch, seq, 32) and pooler_output (batch, 32). Its weights are
    not trained: tests run onnxruntime's transformer optimizer on it (num_heads 4, hidden 32)."""
    torch.manual_seed(0)
    model = BertSmall().eval()
    ids = torch.randint(0, 100, (2, 7))
    names = ["input_ids", "attention_mask", "token_type_ids"]
    axes = {n: {0: "batch", 1: "seq"} for n in names}
    axes.update({"last_hidden_state": {0: "batch", 1: "seq"}, "pooler_output": {0: "batch"}})
    path = HERE / "bert_small.onnx"
    torch.onnx.export(model, (ids, torch.ones_like(ids), torch.zeros_like(ids)), str(path), input_names=names,
                      output_names=["last_hidden_state", "pooler_output"], dynamic_axes=axes, opset_version=17,
                      dynamo=False)
    print(f"wrote {path} ({path.stat().st_size / 1e6:.2f} MB)")


def export_recurrent(cell: type[nn.Module], path: Path) -> None:
    """Input x (batch, seq, 8); outputs y (batch, seq, 5) and the final states
    h (and c for an LSTM), (4, batch, 12)."""
    model = RecurrentSmall(cell).eval()
    states = ["h", "c"] if cell is nn.LSTM else ["h"]
    axes = {"x": {0: "batch", 1: "seq"}, "y": {0: "batch", 1: "seq"}, **{s: {1: "batch"} for s in states}}
    torch.onnx.export(model, (torch.randn(2, 6, 8),), str(path), input_names=["x"], output_names=["y", *states],
                      dynamic_axes=axes, opset_version=17, dynamo=False)
    print(f"wrote {path} ({path.stat().st_size / 1e6:.2f} MB)")


def main_recurrent() -> None:
    torch.manual_seed(0)
    export_recurrent(nn.GRU, HERE / "gru_small.onnx")
    export_recurrent(nn.LSTM, HERE / "lstm_small.onnx")


class CondSmall(nn.Module):
    """``torch.cond``: relu(x) * 2 where the sum is positive, else sigmoid(x) - 1."""

    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda v: torch.relu(v) * 2, lambda v: torch.sigmoid(v) - 1, (x,))


class IfSmall(nn.Module):
    def forward(self, x):
        if bool(x.sum() > 0):
            y = x * 2.0 + 1.0
        else:
            y = x.abs() - 1.0
        return y


class LoopSmall(nn.Module):
    def forward(self, x, n: int):
        y = x
        for _ in range(n):
            y = y * 0.5 + x
        return y


def main_control() -> None:
    path = HERE / "cond_small.onnx"
    batch = torch.export.Dim("batch")
    torch.onnx.export(CondSmall(), (torch.randn(3, 4),), str(path), input_names=["x"], output_names=["y"],
                      dynamo=True, dynamic_shapes={"x": {0: batch}}, external_data=False)
    print(f"wrote {path} ({path.stat().st_size / 1e6:.2f} MB)")
    for module, args, names, path in [(IfSmall(), (torch.randn(3, 4),), ["x"], HERE / "if_small.onnx"),
                                      (LoopSmall(), (torch.randn(3, 4), torch.tensor(3)), ["x", "n"],
                                       HERE / "loop_small.onnx")]:
        torch.onnx.export(torch.jit.script(module), args, str(path), dynamo=False, input_names=names,
                          output_names=["y"], dynamic_axes={"x": {0: "batch"}})
        print(f"wrote {path} ({path.stat().st_size / 1e6:.2f} MB)")


if __name__ == "__main__":
    main()

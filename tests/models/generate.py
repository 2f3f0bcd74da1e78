"""Export the torch models the tests use (random weights, seeded).

    python -m tests.models.generate          # needs torch; writes tests/models/*.onnx

CI needs no torch: the exported files (each well under 2 MB) are committed.
- resnet_small.onnx: a ResNet with BasicBlocks and batch norm; dynamic batch.
- gpt_small.onnx: a GPT-style decoder (token + position embeddings, causal
  self-attention, GELU MLP, layer norm); dynamic batch and sequence.
- gru_small.onnx, lstm_small.onnx: torch.nn.GRU / torch.nn.LSTM, 2 layers,
  bidirectional, batch_first, then a linear head; outputs the head and the
  final states; dynamic batch and sequence.
"""

from __future__ import annotations

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


if __name__ == "__main__":
    main()

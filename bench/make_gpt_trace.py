"""Make a real, large PyTorch profiler (Kineto) trace on a GPU: a 6-layer GPT (d_model 768,
12 heads, sequence 512, batch 8, bf16 autocast, AdamW) trained for 52 steps, of which 48
are profiled with shapes and memory recorded - the shape of the trace issue 29 was measured
on (a 6-layer GPT on an H100, 48 profiled steps, ~515k events, 173 MB). The trace is written
gzipped to $OUT (or the folder given), cut into pieces of 15 MiB so each can be carried back
from a lent GPU machine; `cat gpt_trace.json.gz.part-* > gpt_trace.json.gz` joins them.

    python bench/make_gpt_trace.py [OUT_DIR] [--steps 48]

Needs PyTorch with CUDA; not part of the test suite (the project builds and tests without a
GPU): bench_kineto_decode.py --file reads the result."""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import time
from pathlib import Path


def main() -> None:
    import torch
    import torch.nn as nn
    from torch.profiler import ProfilerActivity, profile, schedule

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", nargs="?", default=os.environ.get("OUT", "/tmp"))
    ap.add_argument("--steps", type=int, default=48)
    ap.add_argument("--layers", type=int, default=6)
    args = ap.parse_args()
    out = Path(args.out)
    torch.manual_seed(0)
    dev = torch.device("cuda")
    vocab, d, heads, seq, batch = 50257, 768, 12, 512, 8

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(vocab, d)
            self.pos = nn.Embedding(seq, d)
            layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.1, batch_first=True, norm_first=True,
                                               activation="gelu")
            self.blocks = nn.TransformerEncoder(layer, args.layers)
            self.norm = nn.LayerNorm(d)
            self.head = nn.Linear(d, vocab, bias=False)
            self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(seq))

        def forward(self, x):
            h = self.tok(x) + self.pos(torch.arange(x.shape[1], device=x.device))
            h = self.blocks(h, mask=self.mask, is_causal=True)
            return self.head(self.norm(h))

    model = GPT().to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    data = torch.randint(0, vocab, (batch, seq + 1), device=dev)

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(data[:, :-1])
            loss = nn.functional.cross_entropy(logits.float().view(-1, vocab), data[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    sched = schedule(wait=2, warmup=2, active=args.steps)
    t = time.time()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], schedule=sched,
                 record_shapes=True, profile_memory=True) as prof:
        for _ in range(4 + args.steps):
            step()
            prof.step()
    torch.cuda.synchronize()
    print(f"trained and profiled in {time.time() - t:.1f} s on {torch.cuda.get_device_name()}", flush=True)
    raw = Path("/tmp/gpt_trace.json")
    t = time.time()
    prof.export_chrome_trace(str(raw))
    print(f"exported {raw.stat().st_size / 1e6:.1f} MB in {time.time() - t:.1f} s", flush=True)
    gz = Path("/tmp/gpt_trace.json.gz")
    with open(raw, "rb") as src, gzip.open(gz, "wb", compresslevel=9) as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    print(f"gzipped {gz.stat().st_size / 1e6:.1f} MB", flush=True)
    out.mkdir(parents=True, exist_ok=True)
    piece = 15 << 20
    with open(gz, "rb") as f:
        for i in range(100):
            chunk = f.read(piece)
            if not chunk:
                break
            (out / f"gpt_trace.json.gz.part-{i:02d}").write_bytes(chunk)
    print("pieces:", sorted(p.name for p in out.iterdir()))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Times this project's GraphSAGE training step on a GPU, for the minibatch shapes that
`sagessd bench step --export FILE` wrote, so that `sagessd bench step --measured OUT` can set
the measurements beside the `[trainer]` step model.

The model is runtime/train/src/model/sage.rs in PyTorch, operation for operation: per layer
(farthest hop first) the destination rows' own linear map (with bias) plus a linear map (no
bias) of the mean of the sampled neighbours' rows (index_select, index_add into zeros, divide
by the in-degree clamped at 1); ReLU and dropout 0.5 between layers; log-softmax and NLL loss
over the targets, the correct count and the loss read back (as the Rust trainer does); backward;
Adam (lr 0.01, one parameter at a time, as libtorch's C++ Adam). FP32 throughout, TF32 off (libtorch's default for matrix products).

Each block is built with exactly the exported counts (destinations, sources, edges): edges
spread over the destinations as evenly as the count allows (fanout-capped sampling gives most
destinations the same number), sources drawn uniformly from the block's source rows. What the
step costs depends on those counts; the graph's ids do not enter it.

Each minibatch is stepped `--warmup` times untimed, then `--repeats` times, each timed with CUDA
events around the whole step; its figure is the median. The copy of its input (features,
indices, labels) from pinned host memory is timed apart. Also measured: the GPU's FP32 matrix
product rate (8192^3) and its device-to-device copy rate, for the roofline's two rates.
"""

import argparse
import json
import statistics

import torch
from torch import nn


class SageLayer(nn.Module):
    def __init__(self, in_dim, out_dim):
        super().__init__()
        self.self_lin = nn.Linear(in_dim, out_dim)
        self.neigh_lin = nn.Linear(in_dim, out_dim, bias=False)

    def forward(self, block, h_src):
        dst_count, src_index, dst_index, in_degree = block
        h_dst = h_src.narrow(0, 0, dst_count)
        gathered = h_src.index_select(0, src_index)
        total = torch.zeros(
            (dst_count, h_src.shape[1]), dtype=h_src.dtype, device=h_src.device
        ).index_add(0, dst_index, gathered)
        mean = total / in_degree.clamp_min(1.0).unsqueeze(1)
        return self.self_lin(h_dst) + self.neigh_lin(mean)


class Sage(nn.Module):
    def __init__(self, in_dim, hidden, classes, layers, dropout=0.5):
        super().__init__()
        dims = [in_dim] + [hidden] * (layers - 1) + [classes]
        self.layers = nn.ModuleList(SageLayer(a, b) for a, b in zip(dims, dims[1:]))
        self.dropout = dropout

    def forward(self, blocks, x):
        h = x
        for i, (layer, block) in enumerate(zip(self.layers, blocks)):
            if i > 0:
                h = torch.nn.functional.dropout(h.relu(), self.dropout, training=True)
            h = layer(block, h)
        return h


def host_block(dst, src, edges, gen):
    """A block's index tensors on the host: `edges` edges over `dst` destinations."""
    per, extra = divmod(edges, dst)
    degree = torch.full((dst,), per, dtype=torch.int64)
    degree[:extra] += 1
    dst_index = torch.repeat_interleave(torch.arange(dst), degree)
    src_index = torch.randint(0, src, (edges,), generator=gen)
    return dst, src_index, dst_index, degree.float()


def gemm_tflops(device):
    n = 8192
    a = torch.randn(n, n, device=device)
    b = torch.randn(n, n, device=device)
    for _ in range(3):
        a @ b
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(10):
        a @ b
    end.record()
    torch.cuda.synchronize()
    return 10 * 2 * n**3 / (start.elapsed_time(end) / 1e3) / 1e12


def d2d_gb_per_s(device):
    src = torch.empty(1 << 30, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(10):
        dst.copy_(src)
    end.record()
    torch.cuda.synchronize()
    # Bytes read and written.
    return 10 * 2 * src.numel() / (start.elapsed_time(end) / 1e3) / 1e9


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("shapes", help="JSON from `sagessd bench step --export`")
    p.add_argument("out", help="where to write the measurements (JSON)")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--repeats", type=int, default=20)
    a = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    device = torch.device("cuda")
    with open(a.shapes) as f:
        shapes = json.load(f)
    gen = torch.Generator().manual_seed(1)
    torch.manual_seed(1)
    layers = len(shapes["minibatches"][0])
    model = Sage(shapes["in_dim"], shapes["hidden"], shapes["classes"], layers).to(device)
    # One parameter at a time, as libtorch's C++ Adam (which tch calls) steps them.
    opt = torch.optim.Adam(model.parameters(), lr=0.01, foreach=False)
    steps, copies = [], []
    for counts in shapes["minibatches"]:
        # Hop order in the file; the model runs the farthest hop first.
        host = [host_block(d, s, e, gen) for d, s, e in reversed(counts)]
        x_host = torch.randn(counts[-1][1], shapes["in_dim"], generator=gen).pin_memory()
        y_host = torch.randint(0, shapes["classes"], (counts[0][0],), generator=gen).pin_memory()
        pinned = [(d, si.pin_memory(), di.pin_memory(), deg.pin_memory()) for d, si, di, deg in host]
        copy_times = []
        for _ in range(3):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            x = x_host.to(device, non_blocking=True)
            y = y_host.to(device, non_blocking=True)
            blocks = [
                (d, si.to(device, non_blocking=True), di.to(device, non_blocking=True),
                 deg.to(device, non_blocking=True))
                for d, si, di, deg in pinned
            ]
            end.record()
            torch.cuda.synchronize()
            copy_times.append(start.elapsed_time(end))
        copies.append(statistics.median(copy_times))

        def step():
            logits = model(blocks, x)
            loss = torch.nn.functional.nll_loss(logits.log_softmax(-1), y)
            int((logits.argmax(-1) == y).sum().item())
            loss.item()
            opt.zero_grad()
            loss.backward()
            opt.step()

        for _ in range(a.warmup):
            step()
        times = []
        for _ in range(a.repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            step()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        steps.append(statistics.median(times))
        print(f"{counts}: step {steps[-1]:.3f} ms, copy {copies[-1]:.3f} ms", flush=True)
    out = {
        "device": torch.cuda.get_device_name(device),
        "torch": torch.__version__,
        "shapes": a.shapes,
        "minibatches": shapes["minibatches"],
        "warmup": a.warmup,
        "repeats": a.repeats,
        "step_ms": steps,
        "copy_ms": copies,
        "gemm_fp32_tflop_per_s": gemm_tflops(device),
        "copy_d2d_gb_per_s": d2d_gb_per_s(device),
    }
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
    print(json.dumps({k: v for k, v in out.items() if k not in ("step_ms", "copy_ms", "minibatches")}))


if __name__ == "__main__":
    main()

"""Minibatches per second through the Python package, in the sampler-comparison harness's
``--extern`` protocol (``shared/anchors/bench_samplers.py``), so that it is timed in the same
run, on the same graph and seed minibatches, as DGL's, GraphBolt's and PyG's samplers.

    bench_samplers.py ... --extern sagessd-pyg="PYTHON -m sagessd.bench --api pyg"
                          --extern sagessd-loader="PYTHON -m sagessd.bench --api loader"

The harness appends ``--graph-dir DIR --seeds SEEDS.npy --fanouts F --threads T --warmup W
--batches B --runs R``. ``DIR``'s CSR (``indptr.npy``, ``indices.npy``) is imported once into a
sagessd dataset (``--cache``, not timed). What is timed, per minibatch:

* ``--api pyg``: ``sagessd.pyg.Sampler.sample_from_nodes``, what PyG's ``NodeLoader`` calls: a
  ``SamplerOutput`` of torch tensors with PyG's semantics (each node's neighbours drawn once,
  at the hop after it was reached), like the harness's ``pyg``; edges = ``len(row)``.
* ``--api loader``: taking the next ``MiniBatch`` (NumPy blocks in the DGL convention, every
  node reached so far sampled at each hop, like the harness's ``dgl``) from a
  ``sagessd.Loader`` that was handed the run's minibatches up front and samples ahead on its
  worker; edges = the blocks' edges.

With ``--threads T`` above 1, T loaders share the minibatches round-robin (each a worker
thread), and are taken in order. The sampler is ``--sampler`` (default ``memory``: the CSR in
memory, as DGL and PyG hold it).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
import time

import numpy as np

import sagessd


def dataset_for(graph_dir: str, cache: str) -> sagessd.Dataset:
    """The sagessd dataset of the harness's graph folder, imported once into ``cache``."""
    key = hashlib.sha256(os.path.abspath(graph_dir).encode()).hexdigest()[:16]
    path = os.path.join(cache, f"{os.path.basename(os.path.normpath(graph_dir))}-{key}")
    if os.path.exists(os.path.join(path, "manifest.toml")):
        return sagessd.Dataset(path)
    # The harness's graphs are symmetric already, rows sorted: imported as they are.
    return sagessd.Dataset.import_ogb(path, graph_dir, symmetric=False)


def run_pyg(ds, args, fanouts, seeds):
    """Times ``sagessd.pyg.Sampler.sample_from_nodes``; returns one result per run."""
    import torch
    import sagessd.pyg
    from torch_geometric.sampler import NodeSamplerInput

    torch.set_num_threads(args.threads)
    samplers = [sagessd.pyg.Sampler(ds, fanouts, sampler=args.sampler)
                for _ in range(args.threads)]
    inputs = [NodeSamplerInput(input_id=None, node=torch.from_numpy(s)) for s in seeds]
    if args.threads == 1:
        def go(i):
            out = samplers[0].sample_from_nodes(inputs[i])
            return len(out.row), len(out.node)
    else:
        from concurrent.futures import ThreadPoolExecutor
        pool = ThreadPoolExecutor(args.threads)

        def go_many(ids):
            # Each thread its own sampler and its share of the minibatches, in order.
            def share(w):
                s = samplers[w]
                return [(len(o.row), len(o.node))
                        for o in (s.sample_from_nodes(inputs[i]) for i in ids[w::args.threads])]
            shares = list(pool.map(share, range(args.threads)))
            return [count for counts in shares for count in counts]

    runs = []
    for r in range(args.runs):
        for s in samplers:
            s.seed, s._count = r, 0
        warm = range(args.warmup)
        timed = range(args.warmup, args.warmup + args.batches)
        if args.threads == 1:
            for i in warm:
                go(i)
            t0 = time.perf_counter()
            counts = [go(i) for i in timed]
        else:
            go_many(list(warm))
            t0 = time.perf_counter()
            counts = go_many(list(timed))
        runs.append(result(time.perf_counter() - t0, counts))
    return runs


def run_loader(ds, args, fanouts, seeds):
    """Times taking each minibatch from loaders sampling ahead; returns one result per run."""
    loaders = [sagessd.Loader(ds, args.sampler, fanouts, prefetch=args.prefetch)
               for _ in range(args.threads)]
    runs = []
    for r in range(args.runs):
        def submit(ids):
            for w, loader in enumerate(loaders):
                loader.submit([(sagessd.minibatch_seed(r, i), seeds[i])
                               for i in ids[w::args.threads]])

        def take(n):
            counts = []
            for i in range(n):
                b = next(loaders[i % args.threads])
                counts.append((sum(len(blk.indices) for blk in b.blocks), len(b.nodes)))
            return counts

        submit(list(range(args.warmup)))
        take(args.warmup)
        t0 = time.perf_counter()
        submit(list(range(args.warmup, args.warmup + args.batches)))
        counts = take(args.batches)
        runs.append(result(time.perf_counter() - t0, counts))
    return runs


def result(seconds, counts):
    """One run's entry of the protocol's JSON: its time, edges and unique nodes summed."""
    return {"time_s": seconds, "edges": int(sum(e for e, _ in counts)),
            "unique_nodes": int(sum(n for _, n in counts))}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--api", choices=["pyg", "loader"], default="pyg")
    p.add_argument("--sampler", default="memory", choices=sagessd.SAMPLERS[:6])
    p.add_argument("--prefetch", type=int, default=8, help="--api loader: minibatches ahead")
    p.add_argument("--cache", default=os.path.join(tempfile.gettempdir(), "sagessd-bench"),
                   help="where the imported datasets are kept")
    for k in ("--graph-dir", "--seeds", "--fanouts"):
        p.add_argument(k, required=True)
    for k in ("--threads", "--warmup", "--batches", "--runs"):
        p.add_argument(k, type=int, required=True)
    args = p.parse_args(argv)
    if args.threads < 1:
        p.error("--threads must be at least 1")
    ds = dataset_for(args.graph_dir, args.cache)
    fanouts = [int(f) for f in args.fanouts.split(",")]
    seeds = [np.ascontiguousarray(s, dtype=np.int64) for s in np.load(args.seeds)]
    need = args.warmup + args.batches
    if len(seeds) < need:
        p.error(f"{args.seeds} has {len(seeds)} minibatches, {need} needed")
    runs = (run_pyg if args.api == "pyg" else run_loader)(ds, args, fanouts, seeds)
    semantics = ("PyG (sample_from_nodes -> SamplerOutput)" if args.api == "pyg"
                 else "DGL blocks (Loader, sampled ahead)")
    print(json.dumps({
        "runs": runs,
        "impl": f"sagessd Python package, sampler {args.sampler}, {semantics}",
        "version": f"sagessd {getattr(sagessd, '__version__', '0.1.0')}, numpy {np.__version__}",
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())

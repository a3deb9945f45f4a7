#!/usr/bin/env python3
"""PyG's own GraphSAGE on Cora, trained through PyG's NodeLoader fed by sagessd.

The loader's sampler is ``sagessd.pyg.Sampler``: in-storage sampling (``isp``) on the
in-process emulated Cosmos+ (``emulator``), the feature rows gathered in the SSD with each
minibatch. Beside it, the same model and hyperparameters fed by PyG's own ``NeighborLoader``
(when PyG has a sampling backend, torch-sparse or pyg-lib; otherwise it says so).

    examples/pyg_cora_sage.py [--dataset DIR] [--sampler isp] [--storage emulator]
                              [--epochs 200] [--seeds 0,1,2]

Hyperparameters (as ../shared/anchors/train_cora_sage.py): 2-layer GraphSAGE (mean), hidden
64, dropout 0.5, Adam lr 0.01, weight decay 5e-4, fanouts 25,10, batch 32 over the 140 training
nodes; full-graph evaluation each epoch; reported: test accuracy at the best validation epoch.
Prints one line per loader and seed, then the mean of each loader.
"""

import argparse
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

import sagessd
import sagessd.pyg
import torch_geometric
from torch_geometric.data import Data
from torch_geometric.loader import NeighborLoader, NodeLoader
from torch_geometric.nn import GraphSAGE

HERE = os.path.dirname(os.path.abspath(__file__))


def open_cora(path):
    if os.path.exists(os.path.join(path, "manifest.toml")):
        return sagessd.Dataset(path)
    return sagessd.Dataset.import_cora(path)


def train(ds, make_loader, full, seed, epochs):
    """Trains from seed `seed`; returns (test accuracy at the best validation, s/epoch)."""
    torch.manual_seed(seed)
    x, y, edge_index = full
    model = GraphSAGE(x.shape[1], 64, num_layers=2, out_channels=ds.num_classes, dropout=0.5)
    opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    split = {k: torch.from_numpy(np.array(ds.split(k))) for k in ("train", "valid", "test")}
    loader = make_loader(split["train"], torch.Generator().manual_seed(seed))
    best_val = best_test = 0.0
    spent = 0.0
    for _ in range(epochs):
        model.train()
        t0 = time.perf_counter()
        for batch in loader:
            opt.zero_grad()
            out = model(batch.x, batch.edge_index)[: batch.batch_size]
            loss = F.cross_entropy(out, batch.y[: batch.batch_size])
            loss.backward()
            opt.step()
        spent += time.perf_counter() - t0
        model.eval()
        with torch.no_grad():
            pred = model(x, edge_index).argmax(1)
        acc = {k: float((pred[v] == y[v]).float().mean()) for k, v in split.items()}
        if acc["valid"] > best_val:
            best_val, best_test = acc["valid"], acc["test"]
    return best_test, spent / epochs


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default=os.path.join(HERE, "..", "target", "examples", "cora"))
    p.add_argument("--sampler", default="isp", choices=sagessd.SAMPLERS)
    p.add_argument("--storage", default="emulator", help=sagessd.STORAGE_HELP)
    p.add_argument("--features", default="agnes", choices=["agnes", "bgl", "none"])
    p.add_argument("--epochs", type=int, default=200)
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    ds = open_cora(a.dataset)
    x = torch.from_numpy(np.array(ds.features())).float()
    y = torch.from_numpy(np.array(ds.labels()))
    indptr = np.asarray(ds.indptr())
    dst = torch.from_numpy(np.repeat(np.arange(ds.num_nodes), np.diff(indptr)))
    edge_index = torch.stack([torch.from_numpy(np.asarray(ds.indices(), dtype=np.int64)), dst])
    full = (x, y, edge_index)
    fs, gs = sagessd.pyg.FeatureStore(ds), sagessd.pyg.GraphStore(ds)

    def ours(train_idx, gen):
        sampler = sagessd.pyg.Sampler(ds, [25, 10], sampler=a.sampler, storage=a.storage,
                                      features=a.features,
                                      feature_store=fs if a.features != "none" else None,
                                      seed=int(gen.initial_seed()))
        print(f"  sagessd: {sampler.loader.description}", flush=True)
        return NodeLoader((fs, gs), node_sampler=sampler, input_nodes=train_idx,
                          batch_size=32, shuffle=True, generator=gen)

    def pygs(train_idx, gen):
        data = Data(x=x, y=y, edge_index=edge_index, num_nodes=ds.num_nodes)
        return NeighborLoader(data, num_neighbors=[25, 10], batch_size=32,
                              input_nodes=train_idx, shuffle=True, generator=gen)

    typing = torch_geometric.typing
    backend = typing.WITH_PYG_LIB or typing.WITH_TORCH_SPARSE
    loaders = [(f"sagessd {a.sampler} on {a.storage}", ours)]
    if backend:
        loaders.append(("PyG NeighborLoader", pygs))
    seeds = [int(s) for s in a.seeds.split(",")]
    means = {}
    for name, make in loaders:
        accs = []
        for seed in seeds:
            acc, s_per_epoch = train(ds, make, full, seed, a.epochs)
            accs.append(acc)
            print(f"{name}: seed {seed}: test accuracy {acc:.4f} at the best validation epoch; "
                  f"{s_per_epoch * 1e3:.1f} ms per training epoch", flush=True)
        means[name] = float(np.mean(accs))
    print(f"torch_geometric {torch_geometric.__version__}, torch {torch.__version__}, "
          f"{a.epochs} epochs, seeds {a.seeds}")
    for name, mean in means.items():
        print(f"mean test accuracy, {name}: {mean:.4f}")
    if not backend:
        print("PyG NeighborLoader: NOT RUN: this PyG has no sampling backend (torch-sparse or "
              "pyg-lib; neither is on PyPI as a wheel for this torch). "
              "scripts/pyg-backend.sh builds torch-sparse (~25 min).")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""sagessd.bench speaks the harness's --extern protocol: its last line is the JSON the harness
reads, and its counts are the samples' (checked against a loader's own minibatches)."""

import json

import numpy as np
import pytest

import sagessd
import sagessd.bench


@pytest.fixture(scope="module")
def harness_graph(rmat, tmp_path_factory):
    """The harness's layout: a folder with int64 indptr.npy and indices.npy, and a seeds file
    of [W + B, 50] minibatches."""
    d = tmp_path_factory.mktemp("harness")
    np.save(d / "indptr.npy", np.asarray(rmat.indptr(), dtype=np.int64))
    np.save(d / "indices.npy", np.asarray(rmat.indices(), dtype=np.int64))
    nodes = np.nonzero(np.diff(rmat.indptr()))[0]
    seeds = np.random.default_rng(0).permutation(nodes)[:6 * 50].reshape(6, 50)
    np.save(d / "seeds.npy", seeds.astype(np.int64))
    return d


@pytest.mark.parametrize("api,threads", [("pyg", 1), ("pyg", 2), ("loader", 1), ("loader", 2)])
def test_the_extern_protocol(harness_graph, capsys, tmp_path, api, threads):
    d = harness_graph
    args = ["--api", api, "--graph-dir", str(d), "--seeds", str(d / "seeds.npy"),
            "--fanouts", "5,3", "--threads", str(threads), "--warmup", "2", "--batches", "4",
            "--runs", "2", "--cache", str(tmp_path)]
    assert sagessd.bench.main(args) == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    out = json.loads(line)
    assert len(out["runs"]) == 2 and "sagessd" in out["impl"]
    ds = sagessd.Dataset(next(tmp_path.iterdir()))
    assert ds.num_edges == len(np.load(d / "indices.npy"))
    seeds = np.load(d / "seeds.npy")
    for r, run in enumerate(out["runs"]):
        assert run["time_s"] > 0
        # The same minibatches, sampled with the same seeds by a loader: the same counts.
        loader = sagessd.Loader(ds, "memory", [5, 3])
        if api == "loader":
            batches = [loader.sample(seeds[i], sagessd.minibatch_seed(r, i)) for i in range(2, 6)]
            edges = sum(len(b.indices) for mb in batches for b in mb.blocks)
            nodes = sum(len(mb.nodes) for mb in batches)
        else:
            # Sampler w of T takes minibatches w, w + T, ...; its i-th call uses seed (r << 32) + i.
            outs = [loader._native.sample_pyg(sagessd.minibatch_seed(r, i // threads), seeds[i])
                    for i in range(6)][2:]
            edges = sum(len(o["row"]) for o in outs)
            nodes = sum(len(o["node"]) for o in outs)
        assert (run["edges"], run["unique_nodes"]) == (edges, nodes)

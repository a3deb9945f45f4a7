"""sagessd for PyG: a feature store, a graph store and a neighbour sampler over a sagessd dataset.

    ds = sagessd.Dataset("cora")
    fs, gs = sagessd.pyg.FeatureStore(ds), sagessd.pyg.GraphStore(ds)
    sampler = sagessd.pyg.Sampler(ds, num_neighbors=[25, 10], sampler="isp",
                                  storage="emulator", features="agnes", feature_store=fs)
    loader = torch_geometric.loader.NodeLoader((fs, gs), node_sampler=sampler,
                                               input_nodes=torch.from_numpy(ds.split("train")),
                                               batch_size=32, shuffle=True)

Each minibatch is what PyG's own ``NeighborSampler`` returns: ``node`` (global ids, the seeds
first), ``row``/``col`` (local edges from sampled neighbour to the node it was sampled for), and
the nodes and edges per hop, each node's neighbours drawn once, uniformly without replacement,
at the hop after it was reached. ``edge`` (the edges' ids in the stored graph) is ``None``: the
sampler does not report which CSR entry it drew. The feature rows the sampler gathered (through
the AGNES or BGL cache, or in storage) are what the feature store hands PyG for that minibatch;
other reads of ``x`` and ``y`` come from the dataset's files.
"""

from __future__ import annotations

import warnings
from typing import List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch_geometric.data import EdgeAttr, TensorAttr
from torch_geometric.data import FeatureStore as _PygFeatureStore
from torch_geometric.data import GraphStore as _PygGraphStore
from torch_geometric.sampler import BaseSampler, NodeSamplerInput, SamplerOutput

from . import Dataset, Loader, minibatch_seed

__all__ = ["FeatureStore", "GraphStore", "Sampler"]


def _dataset(ds) -> Dataset:
    return ds if isinstance(ds, Dataset) else Dataset(ds)


def _shared(array: np.ndarray) -> torch.Tensor:
    """A tensor over a read-only (memory-mapped) array, without a copy: the stores never write
    to what they hand out, so torch's warning about non-writable arrays is silenced here."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return torch.from_numpy(array)


class FeatureStore(_PygFeatureStore):
    """The node features (``x``, as float32) and labels (``y``) of a dataset, read-only.

    Rows come from the dataset's memory-mapped files, except for the minibatch a
    :class:`Sampler` given this store has just sampled with features: its rows are the ones the
    sampler gathered."""

    def __init__(self, dataset):
        super().__init__()
        self.dataset = _dataset(dataset)
        self._attrs = {}
        if self.dataset.has("features"):
            self._attrs["x"] = self.dataset.features()
        if self.dataset.has("labels"):
            self._attrs["y"] = self.dataset.labels()
        self._gathered: Optional[Tuple[torch.Tensor, torch.Tensor]] = None
        #: How many reads of ``x`` were served with rows a sampler gathered (the rest came from
        #: the dataset's files).
        self.gathered_reads = 0

    def _stash(self, node: torch.Tensor, x: torch.Tensor) -> None:
        """The rows a sampler gathered for the minibatch whose nodes are ``node``."""
        self._gathered = (node, x)

    def _put_tensor(self, tensor, attr: TensorAttr) -> bool:
        return False  # read-only: the dataset's files are the store

    def _remove_tensor(self, attr: TensorAttr) -> bool:
        return False

    def _array(self, attr: TensorAttr) -> np.ndarray:
        if attr.attr_name not in self._attrs:
            raise KeyError(f"dataset {self.dataset.name} has no {attr.attr_name!r} "
                           f"(it has {sorted(self._attrs)})")
        return self._attrs[attr.attr_name]

    def _get_tensor(self, attr: TensorAttr) -> Optional[torch.Tensor]:
        index = attr.index
        if (attr.attr_name == "x" and self._gathered is not None and index is not None
                and index is self._gathered[0]):
            self.gathered_reads += 1
            return self._gathered[1]
        array = self._array(attr)
        if index is None:
            rows = np.asarray(array)
        else:
            if isinstance(index, torch.Tensor):
                index = index.numpy()
            rows = array[np.asarray(index)]
        tensor = _shared(np.ascontiguousarray(rows))
        return tensor.float() if attr.attr_name == "x" else tensor

    def _get_tensor_size(self, attr: TensorAttr) -> Tuple[int, ...]:
        return tuple(self._array(attr).shape)

    def get_all_tensor_attrs(self) -> List[TensorAttr]:
        return [TensorAttr(group_name=None, attr_name=name) for name in self._attrs]


class GraphStore(_PygGraphStore):
    """The dataset's graph as PyG's CSR (and, for a symmetric graph, CSC: the same arrays)."""

    def __init__(self, dataset):
        super().__init__()
        self.dataset = _dataset(dataset)
        n = self.dataset.num_nodes
        self._layouts = ["csr", "csc"] if self.dataset.symmetric else ["csr"]
        self._size = (n, n)

    def _put_edge_index(self, edge_index, edge_attr: EdgeAttr) -> bool:
        return False  # read-only

    def _remove_edge_index(self, edge_attr: EdgeAttr) -> bool:
        return False

    def _get_edge_index(self, edge_attr: EdgeAttr):
        layout = str(getattr(edge_attr.layout, "value", edge_attr.layout))
        if layout not in self._layouts:
            raise KeyError(f"layout {layout}: this graph has {self._layouts}")
        indptr = _shared(np.asarray(self.dataset.indptr(), dtype=np.int64))
        indices = _shared(np.asarray(self.dataset.indices(), dtype=np.int64))
        return indptr, indices

    def get_all_edge_attrs(self) -> List[EdgeAttr]:
        return [EdgeAttr(edge_type=None, layout=layout, is_sorted=True, size=self._size)
                for layout in self._layouts]


class Sampler(BaseSampler):
    """PyG's ``BaseSampler`` on sagessd: ``sample_from_nodes`` samples with ``sampler``
    (``memory``, ``mmap``, ``direct``, ``uring``, ``agnes``, ``hyperbatch``, ``isp``,
    ``isp-hyperbatch``) on ``storage`` (``files``, ``emulator[:HW.toml]``, ``tcp://...``,
    ``passthru:/dev/ngXnY``), ``num_neighbors`` per hop from the seeds outwards.

    With ``features`` (``agnes``, ``bgl``; gathered in storage by the ``isp`` samplers) the rows
    are gathered with each minibatch and handed to ``feature_store``. ``seed`` seeds the
    sampling function (minibatch ``i`` uses :func:`sagessd.minibatch_seed`). Other options go
    to :class:`sagessd.Loader`.

    PyG asks for one minibatch at a time, so each is sampled on its own: the hyperbatch
    samplers (``hyperbatch``, ``isp-hyperbatch``) then read as their per-minibatch forms do,
    and ``isp`` keeps one job in flight. :meth:`sagessd.Loader.epoch` samples whole epochs
    ahead, in hyperbatches.
    """

    def __init__(self, dataset, num_neighbors: Sequence[int], sampler: str = "mmap",
                 storage: str = "files", features: str = "none",
                 feature_store: Optional[FeatureStore] = None, seed: int = 0, **options):
        if features != "none" and feature_store is None:
            raise ValueError(f"features={features!r} gathers rows for a feature store: "
                             "pass feature_store=sagessd.pyg.FeatureStore(dataset)")
        self.dataset = _dataset(dataset)
        self.num_neighbors = [int(f) for f in num_neighbors]
        self.loader = Loader(self.dataset, sampler, self.num_neighbors, storage=storage,
                             features=features, **options)
        self.feature_store = feature_store
        self.seed = int(seed)
        self._count = 0

    def sample_from_nodes(self, index: NodeSamplerInput, **kwargs) -> SamplerOutput:
        """Samples around ``index.node`` (distinct seeds) and returns PyG's ``SamplerOutput``."""
        seeds = index.node.numpy().astype(np.int64, copy=False)
        if len(np.unique(seeds)) != len(seeds):
            raise ValueError("seed nodes repeat within a minibatch: PyG's node[:batch_size] "
                             "would not be the seeds")
        out = self.loader._native.sample_pyg(minibatch_seed(self.seed, self._count), seeds)
        self._count += 1
        node = torch.from_numpy(out["node"])
        raw = out["features"]
        if raw is not None and self.feature_store is not None:
            x = torch.from_numpy(self.loader._rows(raw))
            self.feature_store._stash(node, x.float())
        return SamplerOutput(
            node=node,
            row=torch.from_numpy(out["row"]),
            col=torch.from_numpy(out["col"]),
            edge=None,
            batch=None,
            num_sampled_nodes=list(out["num_sampled_nodes"]),
            num_sampled_edges=list(out["num_sampled_edges"]),
            metadata=(index.input_id, index.time),
        )

    def sample_from_edges(self, index, neg_sampling=None):
        raise NotImplementedError("sagessd samples around nodes (sample_from_nodes); "
                                  "link-level sampling is not supported")

    @property
    def edge_permutation(self):
        return None

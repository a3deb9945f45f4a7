"""sagessd for Python: datasets, every sampler on every storage target, and minibatches as NumPy.

A :class:`Dataset` is a folder of ``.npy`` arrays and a ``manifest.toml`` (open one, generate an
R-MAT, or import Cora, a SNAP edge list or OGB arrays). A :class:`Loader` samples it with any
sampler -- ``memory``, ``mmap``, ``direct``, ``uring`` (this machine's files), ``agnes``,
``hyperbatch`` (AGNES block layout), ``isp``, ``isp-ids``, ``isp-hyperbatch`` (in-storage sampling on an
SSD) -- reading from ``storage`` (``files``; ``emulator`` or ``emulator:HW.toml``, the in-process
emulated SSD; ``tcp://HOST:PORT/NQN``; ``passthru:/dev/ngXnY``), with feature rows gathered
through the AGNES cache, the BGL FIFO cache, or in storage. Sampling runs on a Rust worker
thread, ahead of the consumer and without the interpreter's lock.

Arrays are NumPy; ``torch.from_numpy`` turns them into tensors without a copy. ``sagessd.pyg``
plugs the same loader into PyG's ``NodeLoader``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Iterator, List, NamedTuple, Optional, Sequence

import numpy as np

from . import _native
from ._native import Error

__all__ = ["Block", "Dataset", "Error", "Loader", "MiniBatch", "SAMPLERS", "STORAGE_HELP",
           "minibatch_seed", "samplers"]


def samplers() -> "tuple[str, ...]":
    """Every sampler, by the name a :class:`Loader` takes: the registry's names, as the CLI's
    ``--sampler`` and every record spell them."""
    return tuple(_native.samplers())


#: Every sampler, by the name a :class:`Loader` takes (``samplers()``).
SAMPLERS = samplers()

#: What ``storage=`` takes.
STORAGE_HELP = "files | emulator | emulator:HW.toml | tcp://HOST:PORT/NQN | passthru:/dev/ngXnY"


def minibatch_seed(seed: int, i: int) -> int:
    """The sampling function's seed of minibatch ``i`` of a run seeded ``seed``: ``seed`` in the
    high 32 bits, ``i`` in the low ones (each taken modulo 2**32)."""
    return ((seed & 0xFFFFFFFF) << 32) | (i & 0xFFFFFFFF)


class Dataset:
    """A dataset folder: its graph (CSR), and where present features, labels and splits."""

    def __init__(self, path: "os.PathLike[str] | str"):
        self._init(_native.Dataset(os.fspath(path)))

    def _init(self, native: "_native.Dataset") -> None:
        self._native = native
        self._files = dict(native.arrays())
        self._cache: dict = {}

    @classmethod
    def _wrap(cls, native: "_native.Dataset") -> "Dataset":
        ds = cls.__new__(cls)
        ds._init(native)
        return ds

    @classmethod
    def generate(cls, path, scale: int, **options) -> "Dataset":
        """Generates an R-MAT of ``2**scale`` nodes into ``path`` (options: ``edge_factor``,
        ``seed``, ``feature_dim``, ``feature_dtype``, ``classes``, ``name``)."""
        return cls._wrap(_native.Dataset.generate(os.fspath(path), scale, **options))

    @classmethod
    def import_cora(cls, path, source=None) -> "Dataset":
        """Imports Cora into ``path`` (from the graphdatascience 2.2 wheel ``source``, or the one
        ``scripts/setup.sh`` downloaded)."""
        src = None if source is None else os.fspath(source)
        here = os.path.dirname(os.path.abspath(__file__))
        return cls._wrap(_native.Dataset.import_cora(os.fspath(path), src, here))

    @classmethod
    def import_snap(cls, path, source, symmetric: bool = True) -> "Dataset":
        """Imports a SNAP edge list into ``path``."""
        return cls._wrap(_native.Dataset.import_graph(os.fspath(path), os.fspath(source), "snap",
                                                      symmetric))

    @classmethod
    def import_ogb(cls, path, source, symmetric: bool = True) -> "Dataset":
        """Imports OGB-style arrays (a folder of ``.npy`` or one ``.npz``) into ``path``."""
        return cls._wrap(_native.Dataset.import_graph(os.fspath(path), os.fspath(source), "ogb",
                                                      symmetric))

    path = property(lambda self: self._native.path, doc="The folder.")
    name = property(lambda self: self._native.name, doc="Its name.")
    num_nodes = property(lambda self: self._native.num_nodes, doc="Nodes.")
    num_edges = property(lambda self: self._native.num_edges, doc="CSR entries.")
    num_classes = property(lambda self: self._native.num_classes, doc="Label classes, or None.")
    symmetric = property(lambda self: self._native.symmetric, doc="Every edge has its reverse.")

    def has(self, name: str) -> bool:
        """Whether the dataset has array ``name`` (features, labels, train, valid, test, ...)."""
        return name in self._files

    def array(self, name: str) -> np.ndarray:
        """Array ``name``, memory-mapped read-only (nothing is read until used)."""
        if name not in self._files:
            raise Error(f"dataset {self.name} ({self.path}) has no {name} array "
                        f"(it has {', '.join(sorted(self._files))})")
        if name not in self._cache:
            self._cache[name] = np.load(self._files[name], mmap_mode="r")
        return self._cache[name]

    def indptr(self) -> np.ndarray:
        """CSR row pointers (int64, ``num_nodes + 1``)."""
        return self.array("indptr")

    def indices(self) -> np.ndarray:
        """CSR neighbour ids, each row sorted."""
        return self.array("indices")

    def features(self) -> np.ndarray:
        """Node features ``[num_nodes, dim]`` (float32 or float16)."""
        return self.array("features")

    def labels(self) -> np.ndarray:
        """Node labels (int64)."""
        return self.array("labels")

    def split(self, name: str) -> np.ndarray:
        """The node ids of split ``train``, ``valid`` or ``test``."""
        if name not in ("train", "valid", "test"):
            raise ValueError(f"split {name!r}: train, valid or test")
        return self.array(name)

    def __repr__(self) -> str:
        return repr(self._native)


class Block(NamedTuple):
    """One hop of a minibatch: a CSC block. Its destinations are the first ``num_dst`` nodes of
    the minibatch, its sources the first ``num_src``; destination ``j``'s sampled neighbours
    are sources ``indices[indptr[j]:indptr[j + 1]]``."""

    num_dst: int
    num_src: int
    indptr: np.ndarray
    indices: np.ndarray

    def edge_index(self) -> np.ndarray:
        """``[2, E]``: row 0 the source (sampled neighbour), row 1 the destination, local."""
        dst = np.repeat(np.arange(self.num_dst, dtype=np.int64), np.diff(self.indptr))
        return np.stack([self.indices, dst])


@dataclass
class MiniBatch:
    """A sampled minibatch: the message-flow graph of its targets, hop by hop."""

    #: The sampling function's seed.
    seed: int
    #: Global node ids in first-seen order; the targets first.
    nodes: np.ndarray
    #: One CSC block per hop, from the targets outwards (``blocks[0]`` ends at the targets).
    blocks: List[Block]
    #: The feature rows of ``nodes``, ``[len(nodes), dim]``, when gathered.
    features: Optional[np.ndarray]
    #: The labels of the targets, when asked.
    labels: Optional[np.ndarray]

    @property
    def batch_size(self) -> int:
        """The number of (distinct) targets."""
        return self.blocks[0].num_dst if self.blocks else 0


class Loader:
    """A sampler on a storage target, with a feature path.

    ``Loader(dataset, "isp", [25, 10], storage="emulator", features="agnes")`` samples in the
    in-process emulated SSD and gathers feature rows in storage. Other options: ``hyperbatch``
    (minibatches per hyperbatch, 8), ``prefetch`` (minibatches sampled ahead, 8), ``cache_mb``
    and ``feature_threshold`` (the feature cache), ``graph_buffer_mb`` and ``block_kb`` (AGNES),
    ``max_batch_size`` (sizes the emulated device's feature buffer), ``labels`` (return the
    targets' labels).
    """

    def __init__(self, dataset: Dataset, sampler: str = "mmap", fanouts: Sequence[int] = (25, 10),
                 storage: str = "files", features: str = "none", **options):
        if not isinstance(dataset, Dataset):
            dataset = Dataset(dataset)
        self.dataset = dataset
        self._native = _native.Loader(dataset._native, sampler, [int(f) for f in fanouts],
                                      storage=storage, features=features, **options)
        dtype = self._native.feature_dtype
        self._dtype = np.dtype(dtype) if dtype else None
        self._dim = self._native.feature_dim

    description = property(lambda self: self._native.description, doc="What it opened.")
    pending = property(lambda self: self._native.pending, doc="Minibatches not yet taken.")

    def _rows(self, raw: Optional[np.ndarray]) -> Optional[np.ndarray]:
        if raw is None or self._dtype is None:
            return None
        return raw.view(self._dtype).reshape(-1, self._dim)

    def _batch(self, d: dict) -> MiniBatch:
        return MiniBatch(
            seed=d["seed"],
            nodes=d["nodes"],
            blocks=[Block(*layer) for layer in d["layers"]],
            features=self._rows(d["features"]),
            labels=d["labels"],
        )

    def sample(self, targets, seed: int = 0) -> MiniBatch:
        """Samples one minibatch around ``targets`` now."""
        return self._batch(self._native.sample(seed, np.asarray(targets, dtype=np.int64)))

    def submit(self, requests) -> None:
        """Queues ``(seed, targets)`` minibatches; iterate the loader to take them, in order."""
        self._native.submit([(int(s), np.asarray(t, dtype=np.int64)) for s, t in requests])

    def __iter__(self) -> Iterator[MiniBatch]:
        return self

    def __next__(self) -> MiniBatch:
        d = self._native.next_batch()
        if d is None:
            raise StopIteration
        return self._batch(d)

    def epoch(self, nodes, batch_size: int, shuffle: bool = True, seed: int = 0,
              drop_last: bool = False) -> Iterator[MiniBatch]:
        """The minibatches of one pass over ``nodes`` (``batch_size`` targets each, shuffled
        with ``seed``), sampled ahead while the caller works on the previous ones."""
        if batch_size < 1:
            raise ValueError(f"batch_size {batch_size}: at least 1")
        nodes = np.asarray(nodes, dtype=np.int64)
        order = np.random.default_rng(seed).permutation(len(nodes)) if shuffle else None
        if order is not None:
            nodes = nodes[order]
        stop = len(nodes) - (len(nodes) % batch_size if drop_last else 0)
        chunks = [nodes[i:i + batch_size] for i in range(0, stop, batch_size)]
        self.submit([(minibatch_seed(seed, i), c) for i, c in enumerate(chunks)])
        return iter(self)

    def stats(self) -> dict:
        """What the storage did so far (reads, bytes, flash pages, modelled device and host
        time on the in-process emulator, wall time)."""
        return self._native.stats()

    def __repr__(self) -> str:
        return f"Loader({self.description})"

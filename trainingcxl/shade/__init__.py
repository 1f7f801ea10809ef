"""SHADE: importance-aware sample cache and sampler for the training data path (docs/shade.md).

Modules: :mod:`.store` (sharded click log on disk standing for remote storage, with I/O
accounting), :mod:`.importance` (per-sample loss, rank-based score, score table),
:mod:`.policies` (SHADE, LRU, LFU, random, importance cache, Belady), :mod:`.sampler`
(sequential, shuffle, importance; relaxed or aggressive), :mod:`.shards` (the shared cache's
shard map), :mod:`.datapath` (what the trainer talks to: batches out, losses in, checkpoint
state), :mod:`.checkpoint` (the state sidecar, JSON + npz), :mod:`.distributed` (several
data-parallel worker processes, one shared cache or local caches),
:mod:`.study` and :mod:`.cli` (``trainingcxl shade``).
"""

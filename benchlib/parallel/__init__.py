"""Layer 2: one run over several processes.

``strategies`` wraps a model for DDP, FSDP2, FSDP1 or the hand-written sharding of
``fsdp_manual``, behind one interface whose single-process version does nothing, so the
training step has no multi-GPU branches; ``launch`` starts torchrun and supervises its ranks.
Imports ``core`` only.
"""

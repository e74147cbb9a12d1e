"""Layer 2: one run over several processes. ``strategies`` wraps a model for DDP, FSDP2, FSDP1 or
``fsdp_manual`` behind one interface (``group``) whose single-process version does nothing;
``launch`` starts torchrun. Imports ``core`` only.
"""

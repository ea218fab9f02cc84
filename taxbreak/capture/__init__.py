"""Capture tools: profiled generation runs, the null-kernel floor, sweeps, synthetic workloads (docs/capture.md).

``models`` (built-in tiny dense / MoE decoders) imports torch; the other modules import it only inside the
functions that need it, so this package, its CLI and the synthetic generator work without torch.
"""

"""hipskinny inside the libraries people already run.

* `hipskinny.integrations.bitsandbytes` -- hipskinny's kernels behind bitsandbytes' 4-bit torch ops
  (``enable`` / ``disable`` / ``enabled``).
* `hipskinny.integrations.transformers` -- an experts backend for transformers' MoE layers and
  ``accelerate(model)`` for its linear layers.

Nothing here is imported by ``import hipskinny``: each module imports its library on use.
"""

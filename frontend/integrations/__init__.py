"""hipskinny inside the libraries people already run.

* `hipskinny.integrations.bitsandbytes` -- hipskinny's kernels behind bitsandbytes' 4-bit torch ops
  (``enable`` / ``disable`` / ``enabled``).
* `hipskinny.integrations.transformers` -- an experts backend for transformers' MoE layers and
  ``accelerate(model)`` for its linear layers.
* `hipskinny.integrations.vllm` -- a vLLM general plugin (entry point ``vllm.general_plugins``)
  serving vLLM's decode GEMMs, MoE experts and routing.

Nothing here is imported by ``import hipskinny``: each module imports its library on use.
"""

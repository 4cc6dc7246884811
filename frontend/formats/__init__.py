"""The data formats hipskinny's ops read: FP8 e4m3 checkpoints (`fp8`), bitsandbytes' 4-bit (`bnb`), AWQ/GPTQ
int4 (`w4a16`) and the sparse-MLA FP8 caches (`mla`): types, quantize/dequantize, layouts and cache tools.
Leaves: they import no op; the public namespaces ``hipskinny.fp8``, ``hipskinny.bnb``, ``hipskinny.w4a16`` and
``hipskinny.mla`` re-export them (the last three with the ops that run on them)."""

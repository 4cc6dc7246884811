"""Runs tiny random models in vLLM's CPU build and prints what happened, as JSON (tests/integrations/test_vllm.py).

    python vllm_driver.py <workdir> <model>:<dtype>:<mode>[:tp<N>] ...

Each run builds (once, in ``workdir``) a tiny randomly initialised model from a transformers config,
starts ``vllm.LLM`` on it (no tokenizer, prompt token ids), generates greedily, and prints one line
``RUN <json>``: the tokens, and from every worker the plugin's state and its call counts during the
generation. Whether the plugin serves is the caller's choice (``HIPSKINNY_VLLM``,
``HIPSKINNY_VLLM_DEVICE`` in the environment): the same driver makes the runs without it.

vLLM spawns processes, hence the ``__main__`` guard; several runs share one process (vLLM's import
costs more than a tiny model's run).
"""

from __future__ import annotations

import gc
import json
import os
import random
import sys
import time

# Shapes: every GEMM dimension a multiple of 32, the head size one vLLM's CPU attention takes.
LAYERS, HIDDEN, FFN, HEADS, KV_HEADS, VOCAB = 2, 256, 512, 4, 2, 1024
EXPERTS, TOP_K, EXPERT_FFN = 4, 2, 256
PROMPTS = (5, 200)          # tokens: one prompt decodes from a short prefill, one prefill is above 128
NEW_TOKENS = 8
SEED = 0


def build(model: str, dtype: str, path: str) -> None:
    import torch
    import transformers

    torch.manual_seed(SEED)
    common = dict(hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                  num_key_value_heads=KV_HEADS, vocab_size=VOCAB, max_position_embeddings=1024,
                  tie_word_embeddings=False)
    if model == "llama":
        m = transformers.LlamaForCausalLM(transformers.LlamaConfig(intermediate_size=FFN, **common))
    elif model == "mixtral":
        m = transformers.MixtralForCausalLM(transformers.MixtralConfig(
            intermediate_size=EXPERT_FFN, num_local_experts=EXPERTS, num_experts_per_tok=TOP_K, **common))
    else:
        raise SystemExit(f"unknown model {model!r}")
    with torch.no_grad():
        for p in m.parameters():        # wider than the default init: logits far apart, few near-ties
            p.normal_(0.0, 0.05)
    m.to(getattr(torch, dtype)).save_pretrained(path)


def plugin_state(worker=None) -> dict:
    """Run in each worker by collective_rpc: the plugin's device and counts."""
    from hipskinny.integrations import vllm as plugin

    state = plugin.status()
    return {"device": state["device"], "why": state["why"], "served": state["served"], "declined": state["declined"],
            "pid": os.getpid()}


def reset_counts(worker=None) -> None:
    from hipskinny.integrations import vllm as plugin

    plugin.served(reset=True)
    plugin.declined(reset=True)


def run(workdir: str, spec: str) -> dict:
    from vllm import LLM, SamplingParams

    model, dtype, mode, *rest = spec.split(":")
    tp = int(rest[0].removeprefix("tp")) if rest else 1
    path = os.path.join(workdir, f"{model}-{dtype}")
    if not os.path.exists(os.path.join(path, "config.json")):
        build(model, dtype, path)
    started = time.time()
    llm = LLM(model=path, dtype=dtype, skip_tokenizer_init=True, enforce_eager=(mode == "eager"),
              max_model_len=512, seed=SEED, tensor_parallel_size=tp)
    loaded = time.time()
    rng = random.Random(SEED + 1)
    prompts = [{"prompt_token_ids": [rng.randrange(VOCAB) for _ in range(n)]} for n in PROMPTS]
    llm.collective_rpc(reset_counts)
    outputs = llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS), use_tqdm=False)
    done = time.time()
    found = {"spec": spec, "tokens": [list(o.outputs[0].token_ids) for o in outputs],
             "workers": llm.collective_rpc(plugin_state), "load_s": round(loaded - started, 1),
             "generate_s": round(done - loaded, 1)}
    del llm
    gc.collect()
    return found


def main() -> None:
    workdir, *specs = sys.argv[1:]
    for spec in specs:
        print("RUN " + json.dumps(run(workdir, spec)), flush=True)


if __name__ == "__main__":
    main()

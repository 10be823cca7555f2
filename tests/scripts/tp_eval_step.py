"""Scoring, the sampler and generation with a tensor-parallel (TP = 2) head, gloo CPU, against the unsharded model.

Run on 2 ranks forked by ``tests.distributed.run_ranks(main, 2, OUT_DIR)`` (the tests) or as
``torchrun --nproc_per_node 2 tests/scripts/tp_eval_step.py OUT_DIR``. A tiny untied Llama's ``lm_head``
is split over the vocabulary with torch's ``parallelize_module`` in three ways: ``ColwiseParallel(output_layouts=
Replicate())`` (logits gathered by the head, what ``tp_plan="auto"`` does), ``use_local_output=False`` (logits a
``Shard(-1)`` DTensor) and the default (each rank returns its local half of the logits). Each rank writes
``OUT_DIR/rank{r}.json``: the per-text NLL differences of ``score_texts``, the sampler's and greedy generation's
agreement with the unsharded model, and the errors of the paths that must refuse.
"""

from __future__ import annotations

import copy
import datetime
import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from distributed_step import exit_when_every_rank_is_done
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard, distribute_tensor
from torch.distributed.tensor.parallel import ColwiseParallel, parallelize_module
from transformers import LlamaForCausalLM

from hf_lmobj.corpus import build_tokenizer
from hf_lmobj.generation import SamplingLogitsProcessor, sampling_generate_kwargs
from hf_lmobj.metrics.scoring import score_texts

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a file: the clone's root, for tests.testing_utils
from tests.testing_utils import tiny_llama  # noqa: E402

TEXTS = ["def f(x):\n    return x + 1\n", "import os\nprint(os.sep)\n", "class A:\n    pass\n"]
STYLES = {
    "replicated": lambda: ColwiseParallel(output_layouts=Replicate()),
    "dtensor_logits": lambda: ColwiseParallel(use_local_output=False),
    "local_shard": lambda: ColwiseParallel(),
}


def build_llama(vocab: int) -> LlamaForCausalLM:
    return tiny_llama(vocab_size=vocab, layers=1, tie_word_embeddings=False, pad_token_id=0).eval()


def nll(model, tokenizer) -> list[float]:
    return [s.nll for s in score_texts(model, tokenizer, TEXTS, max_length=16, stride=8, progress=False)]


def style_case(style: str, mesh, ref, tokenizer, want: list[float]) -> dict:
    model = copy.deepcopy(ref)
    parallelize_module(model, mesh, {"lm_head": STYLES[style]()})
    res: dict = {}
    try:
        res["nll_diff"] = max(abs(a - b) for a, b in zip(nll(model, tokenizer), want))
    except ValueError as exc:
        res["error"] = str(exc)
    if style == "replicated":  # greedy generation through the package's sampler equals the unsharded model's
        prompt = tokenizer(["def f("], return_tensors="pt", add_special_tokens=False)
        kwargs = {**sampling_generate_kwargs(temperature=0), "max_new_tokens": 6, "pad_token_id": 0}
        res["greedy_equal"] = torch.equal(model.generate(**prompt, **kwargs), ref.generate(**prompt, **kwargs))
    return res


def sampler_case(mesh, vocab: int) -> dict:
    """A Shard(-1) DTensor of scores is gathered: the filtered rows equal those of the full scores."""
    scores = torch.randn(3, vocab, generator=torch.Generator().manual_seed(1))  # the same on both ranks
    sharded = distribute_tensor(scores, mesh, [Shard(1)])
    proc = SamplingLogitsProcessor(temperature=0.7, top_k=20, top_p=0.9)
    out = proc(None, sharded)
    return {"sampler_equal": torch.equal(out, proc(None, scores)), "sampler_type": type(out).__name__}


def main(out_dir: str) -> None:
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    torch.set_num_threads(1)
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    tokenizer = build_tokenizer(vocab_size=400, max_documents=20)
    vocab = len(tokenizer) + len(tokenizer) % 2  # even: each rank holds half of the head
    ref = build_llama(vocab)
    want = nll(ref, tokenizer)
    result = {style: style_case(style, mesh, ref, tokenizer, want) for style in STYLES}
    result["sampler"] = sampler_case(mesh, vocab)
    Path(out_dir, f"rank{dist.get_rank()}.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main(sys.argv[1])
    exit_when_every_rank_is_done()

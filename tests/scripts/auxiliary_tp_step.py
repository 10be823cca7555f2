"""Multi-token prediction and ELECTRA under tensor parallelism (TP = 2, gloo CPU), against one process.

Run on 2 ranks forked by ``tests.distributed.run_ranks(main, 2, OUT_DIR)`` (the tests) or as
``torchrun --nproc_per_node 2 tests/scripts/auxiliary_tp_step.py OUT_DIR``. Every rank:

* ``mtp/<style>/<architecture>``: a tiny Llama whose ``lm_head.weight`` is a ``Shard(0)`` DTensor, loaded with
  transformers' ``tp_plan="auto"`` (``tp_plan/untied``, ``tp_plan/tied``) or parallelized by hand with torch's
  ``ColwiseParallel`` on the head (``colwise``), wrapped in a ``MultiTokenPredictionModel`` (D = 2, sequential
  and parallel); ``AuxiliaryObjectiveTrainer``'s per-depth counts and ``compute_loss``, backward; the loss,
  each depth's loss and every gradient compared with the unsharded wrapper's on the same packed batch.
  The trainer is built around the unsharded twin (accelerate refuses a ``ParallelismConfig`` on CPU
  processes, and transformers hands it one for a ``tp_size`` > 1 model: the refusal is recorded) and
  given the TP model afterwards, as ``tp_trainer_step.py`` does for the stock model.
* ``electra``: an ELECTRA pair whose shared word embedding is sharded over the vocabulary: the refusal
  at construction and at the first forward.

Each rank writes ``OUT_DIR/rank{r}.json``.
"""

from __future__ import annotations

import copy
import datetime
import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from auxiliary_step import build_aux_model, build_rows
from distributed_step import exit_when_every_rank_is_done, sgd_args
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard, distribute_tensor
from torch.distributed.tensor.parallel import ColwiseParallel, parallelize_module
from tp_trainer_step import build_llama, error, maxdiff
from transformers import LlamaForCausalLM

from hf_lmobj.models.electra import ElectraPretrainingModel
from hf_lmobj.models.mtp import MTPConfig, MultiTokenPredictionModel
from hf_lmobj.trainer.auxiliary import AuxiliaryObjectiveTrainer

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a file: the clone's root, for tests.testing_utils
from tests.testing_utils import stack_rows  # noqa: E402


def sharded_llama(style: str, out_dir: str, mesh) -> tuple[LlamaForCausalLM, LlamaForCausalLM]:
    """(the unsharded reference, its TP twin) for one style."""
    if style == "colwise":
        reference = build_llama(False)
        model = copy.deepcopy(reference)
        parallelize_module(model, mesh, {"lm_head": ColwiseParallel(output_layouts=Replicate())})
        return reference, model
    from transformers.distributed.configuration_utils import DistributedConfig

    tied = style.endswith("/tied")
    path = Path(out_dir, f"llama_{'tied' if tied else 'untied'}")
    if dist.get_rank() == 0 and not path.exists():
        build_llama(tied).save_pretrained(path)
    dist.barrier()
    reference = LlamaForCausalLM.from_pretrained(path)
    model = LlamaForCausalLM.from_pretrained(path, distributed_config=DistributedConfig(tp_plan="auto"))
    return reference, model


def mtp_case(style: str, architecture: str, out_dir: str, mesh) -> dict:
    reference_base, tp_base = sharded_llama(style, out_dir, mesh)
    config = MTPConfig(num_depths=2, architecture=architecture, loss_weight=0.5)
    reference = MultiTokenPredictionModel(reference_base, config, seed=0)
    res: dict = {"head_placements": str(getattr(tp_base.lm_head.weight, "placements", None))}
    try:
        model = MultiTokenPredictionModel(tp_base, config, seed=0)
    except Exception as exc:  # noqa: BLE001 - a refusal is part of the report
        res["construction"] = error(exc)
        return res
    res["wrapper_tp_size"] = getattr(model, "tp_size", None)
    batch = stack_rows(build_rows("mtp"))
    trainer = AuxiliaryObjectiveTrainer(model=reference, args=sgd_args(str(Path(out_dir, "run")), 8, 1))
    trainer.model = model  # the Trainer's own pieces on the TP model (see the module docstring)
    res["ranks_per_replica"] = trainer._ranks_per_replica()
    res["data_parallel_size"] = trainer._data_parallel_size()
    ref_counts = reference.count_targets(batch)
    try:
        counts = trainer._get_num_items_in_batch([batch], torch.device("cpu"))
        res["counts"], res["ref_counts"] = counts.tolist(), ref_counts.tolist()
        loss = trainer.compute_loss(model, dict(batch), num_items_in_batch=counts)
        terms = {k: v.item() for k, v in trainer._term_sums.items()}
        trainer._term_sums = {}
        loss.backward()
    except Exception as exc:  # noqa: BLE001
        res.update(error(exc))
        return res
    ref_loss = trainer.compute_loss(reference, dict(batch))  # one process, the local counts are the global ones
    ref_terms = {k: v.item() for k, v in trainer._term_sums.items()}
    ref_loss.backward()
    res["loss"], res["ref_loss"] = loss.item(), ref_loss.item()
    res["loss_diff"] = abs(loss.item() - ref_loss.item())
    res["term_diff"] = max(abs(terms[k] - ref_terms[k]) for k in ref_terms)
    ref_params = dict(reference.named_parameters())
    got = dict(model.named_parameters())
    res["unmatched"] = sorted(set(got) ^ set(ref_params))
    res["no_grad"] = sorted(n for n, p in got.items() if p.grad is None and ref_params[n].grad is not None)
    grads = {n: maxdiff(p.grad, ref_params[n].grad) for n, p in got.items() if p.grad is not None}
    res["grad_diff"] = max(grads.values())
    res["worst_grad"] = max(grads, key=grads.get)
    res["mtp_grad_norm"] = sum(float(p.grad.norm()) for p in model.mtp.parameters())
    if style.startswith("tp_plan"):
        res["trainer_with_tp_model"] = trainer_refusal(model, out_dir)
    return res


def trainer_refusal(model: MultiTokenPredictionModel, out_dir: str) -> str:
    """What building the trainer around the TP wrapper gives: on CPU, accelerate's ParallelismConfig refusal,
    which shows that the Trainer read the wrapper's tp_size as it reads the stock model's."""
    from accelerate.state import AcceleratorState

    try:
        AuxiliaryObjectiveTrainer(model=model, args=sgd_args(str(Path(out_dir, "run")), 8, 1))
        return "accepted"
    except Exception as exc:  # noqa: BLE001
        return error(exc)["error"]
    finally:
        AcceleratorState._reset_state(reset_partial_state=False)  # drop the refused attempt's parallelism_config


def electra_case(mesh) -> dict:
    res: dict = {}
    pair = build_aux_model("electra")  # the shared word embedding then sharded over the vocabulary
    sharded = torch.nn.Parameter(distribute_tensor(pair.discriminator.get_input_embeddings().weight.detach(), mesh,
                                                   [Shard(0)]))  # fmt: skip
    generator, discriminator = copy.deepcopy(pair.generator), copy.deepcopy(pair.discriminator)
    discriminator.electra.embeddings.word_embeddings.weight = sharded
    try:
        ElectraPretrainingModel(generator, discriminator)
        res["construction"] = "accepted"
    except Exception as exc:  # noqa: BLE001
        res["construction"] = error(exc)["error"]
    pair.discriminator.electra.embeddings.word_embeddings.weight = sharded  # sharded after construction
    batch = stack_rows(build_rows("electra"))
    try:
        pair(**batch, sampling_seed=0)
        res["forward"] = "accepted"
    except Exception as exc:  # noqa: BLE001
        res["forward"] = error(exc)["error"]
    return res


def main(out_dir: str) -> None:
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    torch.set_num_threads(1)
    mesh = init_device_mesh("cpu", (dist.get_world_size(),), mesh_dim_names=("tp",))
    result: dict = {}
    for style in ("colwise", "tp_plan/untied", "tp_plan/tied"):
        for architecture in ("sequential", "parallel"):
            try:
                result[f"mtp/{style}/{architecture}"] = mtp_case(style, architecture, out_dir, mesh)
            except Exception as exc:  # noqa: BLE001
                result[f"mtp/{style}/{architecture}"] = error(exc)
    result["electra"] = electra_case(mesh)
    Path(out_dir, f"rank{dist.get_rank()}.json").write_text(json.dumps(result, indent=1, default=str))


if __name__ == "__main__":
    main(sys.argv[1])
    exit_when_every_rank_is_done()

"""Helpers shared by several test modules and by the torchrun scripts in tests/scripts (import them from here,
never from another test module; a script run as a file puts the clone's root on ``sys.path`` first).

Tiny models: one builder per architecture (``tiny_gpt2``, ``tiny_llama``, ``tiny_opt``, ``tiny_bert``, ``tiny_t5``,
``tiny_bart``), each with keyword overrides; ``build_model`` / ``build_rows`` / ``stack_rows``, the tiny stock model
and hand-built batch of each objective. Checks: one function per invariant (``packed_documents``,
``assert_each_document_alone``, ``assert_right_padded``, ``assert_bf16_autocast_loss_is_close``; ``reconstruct``
for span corruption).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
ROOT = REPO
RECIPES = REPO / "recipes"
SCRIPTS = REPO / "tests" / "scripts"


def load_recipe(name: str = "pretrain"):
    """``recipes/<name>.py`` loaded from the clone as a module (its ``main(argv)`` runs the recipe in-process).

    A fresh module each call, named inside ``hf_lmobj.recipes`` so that its relative imports resolve.
    """
    spec = importlib.util.spec_from_file_location(f"hf_lmobj.recipes.{name}_recipe", ROOT / "recipes" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve string annotations through sys.modules
    spec.loader.exec_module(module)
    return module


QUICK = [
    "--max_documents", "200", "--vocab_size", "1024", "--hidden_size", "32", "--num_hidden_layers", "2",
    "--num_attention_heads", "2", "--max_length", "64", "--max_position_embeddings", "64",
    "--per_device_train_batch_size", "4", "--per_device_eval_batch_size", "4", "--max_eval_rows", "8",
    "--logging_steps", "1", "--eval_steps", "2", "--learning_rate", "1e-3",
]  # fmt: skip


CONFIGS = sorted((ROOT / "recipes" / "configs").glob("*/*.yaml"))


#: The ``[recipes]`` extra's distributions (and their top-level modules): the core never imports them on import.
RECIPE_EXTRA = ("peft", "jinja2", "matplotlib", "mpl_toolkits", "pylab")


#: What an exported Space needs (its requirements.txt), hf_lmobj not among it.
SPACE_DEPENDENCIES = ("evaluate", "datasets", "torch", "transformers")


def clean_env() -> dict[str, str]:
    """This process's environment for a venv's python: no PYTHONPATH (it could put this clone ahead of what the venv
    holds), no Hub access, no tokenizer threads."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return {**env, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


def launch_env(**extra: str) -> dict[str, str]:
    """The environment of a launched run: one thread per process, quiet tokenizers, no Hub access."""
    return {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1", **extra}


def see_site_view(root: Path, view: Path) -> Path:
    """The python of the venv at ``root``, made to see the packages linked into ``view`` (a ``.pth`` file)."""
    python = root / "bin" / "python"
    own_site = subprocess.run(
        [python, "-c", "import site; print(site.getsitepackages()[0])"], capture_output=True, text=True, check=True
    ).stdout.strip()
    (Path(own_site) / "deps_view.pth").write_text(f"{view}\n")
    return python


def write_stdlib_jsonl(folder: Path, documents: int, files: int = 3) -> Path:
    """The first ``documents`` stdlib training files as ``files`` JSONL files in ``folder`` (a local
    dataset with no validation split, streamed by the pipeline tests)."""
    import json

    from hf_lmobj.corpus import load_stdlib_corpus

    texts = load_stdlib_corpus(max_documents=documents)["train"]["text"]
    for part in range(files):
        with open(folder / f"part{part}.jsonl", "w") as f:
            for text in texts[part::files]:
                f.write(json.dumps({"text": text}) + "\n")
    return folder


def real(row: torch.Tensor, mask: torch.Tensor | None = None) -> list[int]:
    """The tokens of ``row`` under ``mask`` (without one: the entries that are not -100)."""
    return row[mask.bool()].tolist() if mask is not None else row[row != -100].tolist()


def reconstruct(input_ids: list[int], labels: list[int], sentinels: set[int], eos: int) -> list[int]:
    """Put every span of ``labels`` back at its sentinel in ``input_ids``."""
    spans: dict[int, list[int]] = {}
    current = None
    for token in labels:
        if token == -100:
            break
        if token in sentinels:
            assert token not in spans, "a sentinel appears twice in one row"
            current = spans.setdefault(token, [])
        elif token == eos:
            current = None
        else:
            current.append(token)
    out: list[int] = []
    for token in input_ids:
        out.extend(spans.pop(token) if token in sentinels else [token])
    assert not spans, "a target span has no sentinel in the input"
    return out


OBJECTIVES = ["causal", "masked", "span"]


QUICK_PRETRAIN = [
    "--config", str(REPO / "recipes/configs/causal/demo.yaml"), "--max_documents", "200", "--vocab_size", "512",
    "--hidden_size", "32", "--num_hidden_layers", "2", "--num_attention_heads", "2", "--max_length", "64",
    "--max_position_embeddings", "128", "--per_device_train_batch_size", "4", "--per_device_eval_batch_size", "4",
    "--max_eval_rows", "8", "--logging_steps", "1", "--max_steps", "2", "--sample_max_new_tokens", "8",
]  # fmt: skip


CONFIG_DIR = REPO / "recipes" / "accelerate_configs"


def torchrun(script: Path, nproc: int, *args: str, timeout: int = 600, cwd: Path | None = None) -> None:
    """Run ``script`` under ``torch.distributed.run`` with ``nproc`` gloo processes (in ``cwd``, default this
    process's); fail with its output."""
    env = launch_env()
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={nproc}",
        str(script),
        *args,
    ]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, cwd=cwd)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


# ---- tiny models: one builder per architecture ----------------------------------------------------------------
#: The hand-built batches of ``build_rows`` (and the tiny models' vocabulary there): sizes and special ids.
VOCAB, SEQ, TARGET_SEQ, NUM_ROWS = 64, 10, 6, 8
PAD, MASK, START, EOS = 0, 1, 0, 2
#: The special ids of the tiny decoder-only models trained on ``build_rows`` (BOS = EOS, as in GPT-2).
TINY_IDS = {"pad_token_id": PAD, "bos_token_id": EOS, "eos_token_id": EOS}
#: A 2-layer, width-32 BERT-style encoder without dropout (BERT in ``build_model``, ELECTRA in auxiliary_step.py).
TINY_ENCODER = {
    "vocab_size": VOCAB,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 64,
    "max_position_embeddings": 32,
    "hidden_dropout_prob": 0.0,
    "attention_probs_dropout_prob": 0.0,
    "pad_token_id": PAD,
}


def _ids(tokenizer, **names: str) -> dict[str, int]:
    """``{"<key>_token_id": tokenizer.<name>_token_id}`` for each ``key=name``; nothing without a tokenizer."""
    return {} if tokenizer is None else {f"{k}_token_id": getattr(tokenizer, f"{n}_token_id") for k, n in names.items()}


def _tiny(default_class, cls, fields: dict, overrides: dict, seed: int | None):
    """``cls(config)`` (``default_class`` when ``cls`` is None) with the class's own config class built from
    ``fields`` updated by ``overrides``, its weights drawn under torch seed ``seed`` with the global RNG left as
    it was (``seed=None``: drawn from the global RNG). In train mode, as built: call ``.eval()`` for eval mode."""
    model_class = cls or default_class
    config = model_class.config_class(**{**fields, **overrides})
    if seed is None:
        return model_class(config)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return model_class(config)


def tiny_gpt2(tokenizer=None, vocab_size=None, positions=64, width=32, layers=2, *, heads=2, dropout=None, seed=0,
              cls=None, **overrides):  # fmt: skip
    """A tiny GPT-2 LM from config (``cls``: another GPT-2 class), seeded (see ``_tiny``).

    ``tokenizer``: the vocabulary size and the BOS / EOS / pad ids; ``dropout``: the three dropout probabilities;
    ``overrides``: any ``GPT2Config`` field (they win over everything else).
    """
    from transformers import GPT2LMHeadModel

    fields = dict(vocab_size=vocab_size or len(tokenizer), n_embd=width, n_layer=layers, n_head=heads,
                  n_positions=positions, **_ids(tokenizer, bos="bos", eos="eos", pad="pad"))  # fmt: skip
    if dropout is not None:
        fields.update(resid_pdrop=dropout, embd_pdrop=dropout, attn_pdrop=dropout)
    return _tiny(GPT2LMHeadModel, cls, fields, overrides, seed)


def tiny_llama(tokenizer=None, vocab_size=None, positions=64, width=32, layers=2, *, heads=2, kv_heads=None,
               ffn=None, seed=0, cls=None, **overrides):  # fmt: skip
    """A tiny Llama LM from config (``cls``: another class whose config takes Llama's fields, e.g. Mistral, Qwen2),
    seeded (see ``_tiny``): ``kv_heads`` defaults to ``heads``, ``ffn`` to twice the width; ``tokenizer`` and
    ``overrides`` as for ``tiny_gpt2``."""
    from transformers import LlamaForCausalLM

    fields = dict(vocab_size=vocab_size or len(tokenizer), hidden_size=width, intermediate_size=ffn or 2 * width,
                  num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads or heads,
                  max_position_embeddings=positions, **_ids(tokenizer, bos="bos", eos="eos", pad="pad"))  # fmt: skip
    return _tiny(LlamaForCausalLM, cls, fields, overrides, seed)


def tiny_opt(vocab_size: int, positions=64, width=32, layers=2, *, heads=2, ffn=None, dropout=None, seed=0,
             cls=None, **overrides):  # fmt: skip
    """A tiny OPT LM from config (its mask ignores position_ids), seeded (see ``_tiny``)."""
    from transformers import OPTForCausalLM

    fields = dict(vocab_size=vocab_size, hidden_size=width, num_hidden_layers=layers, num_attention_heads=heads,
                  ffn_dim=ffn or 2 * width, max_position_embeddings=positions, word_embed_proj_dim=width)  # fmt: skip
    if dropout is not None:
        fields["dropout"] = dropout
    return _tiny(OPTForCausalLM, cls, fields, overrides, seed)


def tiny_bert(tokenizer=None, vocab_size=None, positions=64, width=32, layers=2, *, heads=2, ffn=None, dropout=None,
              seed=0, cls=None, **overrides):  # fmt: skip
    """A tiny BERT masked LM from config (``cls``: another BERT head, or a class whose config takes BERT's fields,
    e.g. RoBERTa, ModernBERT), seeded (see ``_tiny``); ``tokenizer``: the vocabulary size and the pad id."""
    from transformers import BertForMaskedLM

    fields = dict(vocab_size=vocab_size or len(tokenizer), hidden_size=width, num_hidden_layers=layers,
                  num_attention_heads=heads, intermediate_size=ffn or 2 * width, max_position_embeddings=positions,
                  **_ids(tokenizer, pad="pad"))  # fmt: skip
    if dropout is not None:
        fields.update(hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)
    return _tiny(BertForMaskedLM, cls, fields, overrides, seed)


def tiny_t5(tokenizer=None, vocab_size=None, width=32, layers=2, *, heads=2, ffn=None, dropout=None, seed=0,
            cls=None, **overrides):  # fmt: skip
    """A tiny T5 from config (``d_kv`` = width / heads), seeded (see ``_tiny``); ``tokenizer``: the vocabulary
    size, the pad id (the decoder's start too) and the EOS id."""
    from transformers import T5ForConditionalGeneration

    fields = dict(vocab_size=vocab_size or len(tokenizer), d_model=width, d_kv=width // heads, d_ff=ffn or 2 * width,
                  num_layers=layers, num_heads=heads,
                  **_ids(tokenizer, decoder_start="pad", pad="pad", eos="eos"))  # fmt: skip
    if dropout is not None:
        fields["dropout_rate"] = dropout
    return _tiny(T5ForConditionalGeneration, cls, fields, overrides, seed)


def tiny_bart(tokenizer=None, vocab_size=None, positions=64, width=32, layers=2, *, heads=2, ffn=None, seed=0,
              cls=None, **overrides):  # fmt: skip
    """A tiny BART from config (``cls``: e.g. ``BartForCausalLM``), seeded (see ``_tiny``); ``tokenizer``: the
    vocabulary size, the pad / BOS / EOS ids and EOS as the decoder's start (as BART's own)."""
    from transformers import BartForConditionalGeneration

    fields = dict(vocab_size=vocab_size or len(tokenizer), d_model=width, encoder_layers=layers, decoder_layers=layers,
                  encoder_attention_heads=heads, decoder_attention_heads=heads, encoder_ffn_dim=ffn or 2 * width,
                  decoder_ffn_dim=ffn or 2 * width, max_position_embeddings=positions,
                  **_ids(tokenizer, pad="pad", bos="bos", eos="eos", decoder_start="eos"))  # fmt: skip
    return _tiny(BartForConditionalGeneration, cls, fields, overrides, seed)


def build_model(objective: str, seed: int = 0) -> torch.nn.Module:
    """The tiny stock model of ``build_rows(objective)`` (hidden 32, 2 layers, dropout 0), seeded, in train mode."""
    if objective == "causal":
        return tiny_gpt2(vocab_size=VOCAB, positions=32, dropout=0.0, seed=seed, **TINY_IDS)
    if objective == "masked":
        return tiny_bert(seed=seed, **TINY_ENCODER)
    return tiny_t5(vocab_size=VOCAB, dropout=0.0, seed=seed, decoder_start_token_id=START, pad_token_id=PAD,
                   eos_token_id=EOS)  # fmt: skip


def build_rows(objective: str, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    """NUM_ROWS pre-collated rows whose numbers of targets all differ (so a wrong denominator shows).

    Example:
        >>> rows = build_rows("masked", seed=0)
        >>> len(rows), sorted(rows[0])
        (8, ['attention_mask', 'input_ids', 'labels'])
    """
    g = torch.Generator().manual_seed(seed)
    rows = []
    for i in range(NUM_ROWS):
        ids = torch.randint(3, VOCAB, (SEQ,), generator=g)
        if objective == "causal":  # lengths 3..10: 2..9 next-token targets
            length = 3 + (i * 5) % 8
            mask = (torch.arange(SEQ) < length).long()
            ids = ids.masked_fill(mask == 0, PAD)
            rows.append({"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)})
        elif objective == "masked":  # 1..8 hand-picked selected positions
            picked = torch.randperm(SEQ, generator=g)[: 1 + (i * 3) % 8]
            labels = torch.full((SEQ,), -100)
            labels[picked] = ids[picked]
            corrupted = ids.clone()
            corrupted[picked] = MASK
            rows.append({"input_ids": corrupted, "attention_mask": torch.ones(SEQ, dtype=torch.long), "labels": labels})
        else:  # 1..6 target tokens, right-padded with -100
            length = 1 + (i * 5) % TARGET_SEQ
            labels = torch.randint(3, VOCAB, (TARGET_SEQ,), generator=g)
            labels[length:] = -100
            decoder_input_ids = torch.cat([torch.tensor([START]), labels[:-1]]).masked_fill(
                torch.cat([torch.tensor([False]), labels[:-1] == -100]), PAD
            )
            rows.append(
                {
                    "input_ids": ids,
                    "attention_mask": torch.ones(SEQ, dtype=torch.long),
                    "labels": labels,
                    "decoder_input_ids": decoder_input_ids,
                }
            )
    return rows


def stack_rows(rows: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Stack pre-collated rows into a batch (the data collator of these tests)."""
    return {key: torch.stack([r[key] for r in rows]) for key in rows[0]}


def flat_parameters(model: torch.nn.Module) -> torch.Tensor:
    """Every parameter of ``model``, flattened into one detached copy."""
    return torch.cat([p.detach().reshape(-1).clone() for p in model.parameters()])


def reference_update(objective: str) -> torch.Tensor:
    """-lr * grad of the stock model's own loss on the full batch of 8 (lr 1, plain SGD)."""
    model = build_model(objective)
    model(**stack_rows(build_rows(objective))).loss.backward()
    return torch.cat([-p.grad.reshape(-1) for p in model.parameters()])


# ---- checks: one per invariant ----------------------------------------------------------------------------
def packed_documents(batch: dict, position_start: int = 0):
    """``(row, begin, end)`` of every document of a packed batch: the runs of ``position_ids`` that restart at
    ``position_start`` (the padding tail, counting on as its own document, is one of them)."""
    for row, positions in enumerate(batch["position_ids"]):
        starts = (positions == position_start).nonzero().flatten().tolist() + [positions.numel()]
        yield from ((row, begin, end) for begin, end in zip(starts[:-1], starts[1:]))


def assert_each_document_alone(model, batch, docs, tolerance=1e-5, position_start=0):
    """No token attends across documents: the packed logits of each document of ``docs`` equal its logits run
    alone (max abs difference < ``tolerance``), and every document is found exactly once in the packed rows.

    Returns ``(row, begin, end, logits alone)`` per document found, for further comparisons.
    """
    found = []
    with torch.no_grad():
        packed = model(**{k: v for k, v in batch.items() if k not in ("labels", "shift_labels")}).logits  # (B, T, V)
        for row, begin, end in packed_documents(batch, position_start):
            ids = batch["input_ids"][row, begin:end]
            if end > begin and ids.tolist() in docs:
                alone = model(input_ids=ids[None]).logits[0]  # (L, V)
                assert (alone - packed[row, begin:end]).abs().max() < tolerance, (row, begin, end)
                found.append((row, begin, end, alone))
    assert sorted(batch["input_ids"][r, b:e].tolist() for r, b, e, _ in found) == sorted(docs)
    return found


def assert_right_padded(batch: dict, row: int, pad_token_id: int) -> tuple[list[int], list[int]]:
    """A seq2seq row is padded on the right, position by position: its labels are targets then -100 only (never
    the pad id, which a seq2seq loss would train on), its attention mask ones then zeros, and its inputs the pad
    id under every 0 of the mask. Returns the row's real ``(input_ids, labels)``."""
    labels, inputs = batch["labels"][row].tolist(), batch["input_ids"][row].tolist()
    mask = batch["attention_mask"][row].tolist()
    k, m = labels.index(-100) if -100 in labels else len(labels), sum(mask)
    assert labels[k:] == [-100] * (len(labels) - k) and -100 not in labels[:k]
    assert mask == [1] * m + [0] * (len(mask) - m) and inputs[m:] == [pad_token_id] * (len(inputs) - m)
    return inputs[:m], labels[:k]


def assert_bf16_autocast_loss_is_close(trainer, model, batch: dict, rel: float = 0.05) -> None:
    """Under CPU bf16 autocast ``trainer.compute_loss`` still returns a float32 loss, within ``rel`` (relative) of
    the float32 loss of the same batch, and its backward runs."""
    full = trainer.compute_loss(model, dict(batch)).item()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mixed = trainer.compute_loss(model, dict(batch))
    mixed.backward()
    assert mixed.dtype == torch.float32 and abs(mixed.item() - full) < rel * full, (mixed.item(), full)


class Oracle(torch.nn.Module):
    """Wraps a model; ``generate`` writes, after each prompt, the answer keyed by that prompt (its real tokens),
    then pad, and records in ``leads`` what healing asked for (the first logits processor's leads, if any)."""

    def __init__(self, model, answers: dict[tuple, list[int]]) -> None:
        super().__init__()
        self.model, self.answers, self.config, self.leads = model, answers, model.config, []

    def forward(self, **kwargs):
        return self.model(**kwargs)

    def generate(self, input_ids, attention_mask, max_new_tokens, **kwargs):
        self.leads += getattr((kwargs.get("logits_processor") or [None])[0], "leads", [])
        rows = []
        for ids, mask in zip(input_ids.tolist(), attention_mask.tolist()):
            prompt = tuple(i for i, m in zip(ids, mask) if m)
            rows.append(ids + (self.answers[prompt] + [kwargs["pad_token_id"]] * max_new_tokens)[:max_new_tokens])
        return torch.tensor(rows)

"""hf_lmobj: causal, masked and span-corruption objectives for the Hugging Face stack.

Every user-facing name of the objectives is importable from here: the collators and ``pack_dataset``,
the losses, ``ObjectiveTrainer`` and its auxiliary objectives, the sampler and the metric loader; each is
also in its package's face (``hf_lmobj.collators``, ...), which :data:`__all__` groups them by. What
runs a training script (configs, resume, time budget, threads, cards, baselines) is importable from its
package: :mod:`hf_lmobj.config`, :mod:`hf_lmobj.trainer`, :mod:`hf_lmobj.cards`, :mod:`hf_lmobj.baselines`. The core needs
only the core dependencies (torch, transformers, accelerate, datasets, evaluate); the recipes
(``hf_lmobj.recipes``) need the ``[recipes]`` extra.

The faces are lazy (PEP 562): ``import hf_lmobj`` imports no submodule, and a name is imported from its
home on first use, with what that home needs and nothing more (``from hf_lmobj import
DataCollatorForCausalLM`` does not import ``transformers.Trainer``). Type checkers and IDEs read the
faces' ``if TYPE_CHECKING:`` imports, which are also the table the faces resolve names by.

Example:
    >>> import hf_lmobj
    >>> hf_lmobj.compute_input_and_target_lengths(512, 0.15, 3.0)
    (568, 114)
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hf_lmobj.collators import (
        CollatorEpochCallback,
        DataCollatorForCausalLM,
        DataCollatorForMaskedLM,
        DataCollatorForSpanCorruption,
        DataCollatorForTextInfilling,
        DataCollatorForUL2,
        Denoiser,
        compute_input_and_target_lengths,
    )
    from hf_lmobj.corpus import build_tokenizer, load_stdlib_corpus
    from hf_lmobj.data import (
        DatasetSource,
        PipelineLoader,
        PretrainingStream,
        RowFormat,
        TextStream,
        TokenStore,
        tokenize_to_token_store,
        write_token_store,
    )
    from hf_lmobj.fim import (
        DataCollatorForFillInTheMiddle,
        FimTokens,
        LeadLogitsProcessor,
        evaluate_infilling,
        fim_dataset,
        fim_prompts,
        heal_prompts,
        infill,
        single_line_cases,
    )
    from hf_lmobj.generation import SamplingLogitsProcessor, sampling_generate_kwargs
    from hf_lmobj.losses import (
        causal_lm_loss,
        linear_cross_entropy,
        linear_token_losses,
        masked_lm_loss,
        seq2seq_lm_loss,
    )
    from hf_lmobj.metrics import LanguageModelingMetrics
    from hf_lmobj.metrics import load as load_metric
    from hf_lmobj.models import (
        ElectraPretrainingConfig,
        ElectraPretrainingModel,
        MTPConfig,
        MultiTokenPredictionModel,
    )
    from hf_lmobj.objectives import OBJECTIVES, ObjectiveSpec, get_objective
    from hf_lmobj.optim import MuonAdamW, MuonAdamWFactory, muon_param_groups
    from hf_lmobj.packing import pack_dataset
    from hf_lmobj.trainer import AuxiliaryObjectiveTrainer, ObjectiveTrainer, make_compute_loss_func

__version__ = "0.1.0"

# One group per package, in the order of the README's layout; each name is also in its package's face.
__all__ = [
    # hf_lmobj.objectives
    "OBJECTIVES",
    "ObjectiveSpec",
    "get_objective",
    # hf_lmobj.collators
    "DataCollatorForCausalLM",
    "DataCollatorForMaskedLM",
    "DataCollatorForSpanCorruption",
    "DataCollatorForUL2",
    "Denoiser",
    "DataCollatorForTextInfilling",
    "CollatorEpochCallback",
    "compute_input_and_target_lengths",
    # hf_lmobj.packing
    "pack_dataset",
    # hf_lmobj.fim
    "DataCollatorForFillInTheMiddle",
    "FimTokens",
    "fim_dataset",
    "fim_prompts",
    "infill",
    "heal_prompts",
    "LeadLogitsProcessor",
    "single_line_cases",
    "evaluate_infilling",
    # hf_lmobj.data
    "DatasetSource",
    "TextStream",
    "TokenStore",
    "tokenize_to_token_store",
    "write_token_store",
    "RowFormat",
    "PretrainingStream",
    "PipelineLoader",
    # hf_lmobj.losses
    "causal_lm_loss",
    "masked_lm_loss",
    "seq2seq_lm_loss",
    "linear_cross_entropy",
    "linear_token_losses",
    # hf_lmobj.models
    "MTPConfig",
    "MultiTokenPredictionModel",
    "ElectraPretrainingConfig",
    "ElectraPretrainingModel",
    # hf_lmobj.optim
    "MuonAdamW",
    "MuonAdamWFactory",
    "muon_param_groups",
    # hf_lmobj.trainer
    "ObjectiveTrainer",
    "make_compute_loss_func",
    "AuxiliaryObjectiveTrainer",
    # hf_lmobj.generation
    "SamplingLogitsProcessor",
    "sampling_generate_kwargs",
    # hf_lmobj.metrics
    "load_metric",
    "LanguageModelingMetrics",
    # hf_lmobj.corpus
    "build_tokenizer",
    "load_stdlib_corpus",
]


def _type_checking_imports(face: str) -> dict[str, tuple[str, str]]:
    """``{name: (module, name there)}`` of the ``from ... import`` lines under ``if TYPE_CHECKING:`` in face ``face``.

    Read from the face's source (the way ``lazy_loader.attach_stub`` reads a stub), so that the lines type checkers
    and IDEs follow are the one table the face resolves its names by.
    """
    import ast

    loader = sys.modules[face].__loader__
    source = loader.get_source(face) if loader is not None else None
    if source is None:
        raise ImportError(f"{face}: its source is needed to find its names' homes; reinstall hf_lmobj with .py files")
    homes = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for line in node.body:
                if isinstance(line, ast.ImportFrom):
                    home = importlib.util.resolve_name("." * line.level + (line.module or ""), face)
                    homes.update({alias.asname or alias.name: (home, alias.name) for alias in line.names})
    return homes


class _Face(types.ModuleType):
    """A lazy face's module type: a name of its ``__all__`` that is also a submodule's (``hf_lmobj.losses`` gives the
    function ``linear_cross_entropy`` of the module ``linear_cross_entropy``) stays the name when that submodule is
    imported, where the import system would make it the module (the face's ``__getattr__`` then finds the name)."""

    def __setattr__(self, name: str, value: object) -> None:
        submodule = isinstance(value, types.ModuleType) and value.__name__ == f"{self.__name__}.{name}"
        if not (submodule and name in vars(self).get("__all__", ())):
            super().__setattr__(name, value)


def _lazy_face(face: str, names: Sequence[str]) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` (PEP 562) of the package face ``face``, whose ``__all__`` is ``names``.

    A name of ``names`` is imported on first use from the module its face's ``if TYPE_CHECKING:`` block imports
    it from, then kept in the face's namespace; any other name is a submodule of the face (imported on first use,
    as ``import face.name`` would) or an ``AttributeError`` naming the face. The face's module becomes a
    :class:`_Face`, so that a submodule named like one of ``names`` does not shadow it.

    Example:
        >>> import hf_lmobj.packing as packing
        >>> packing.pack_dataset.__module__, "pack_dataset" in dir(packing)
        ('hf_lmobj.packing.dataset', True)
    """
    sys.modules[face].__class__ = _Face
    homes: dict[str, tuple[str, str]] = {}  # read on the first lookup: a face that is only passed through reads nothing

    def __getattr__(name: str) -> object:
        if name in names:
            if not homes:
                homes.update(_type_checking_imports(face))
            if name not in homes:
                raise ImportError(f"{face}.__all__ names {name!r}, which its `if TYPE_CHECKING:` block does not import")
            home, there = homes[name]
            value = getattr(importlib.import_module(home), there)
            setattr(sys.modules[face], name, value)  # found once: later lookups skip __getattr__
            return value
        if not name.startswith("__"):
            try:
                return importlib.import_module(f"{face}.{name}")
            except ModuleNotFoundError as error:
                if error.name != f"{face}.{name}":
                    raise  # a submodule that exists but lacks a dependency says so
        message = f"module {face!r} has no attribute {name!r}; its public names are in {face}.__all__"
        raise AttributeError(message, name=name, obj=sys.modules[face])

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[face]), *names})

    return __getattr__, __dir__


__getattr__, __dir__ = _lazy_face(__name__, __all__)

"""Old module paths of moved modules: importable for one more release, with a ``DeprecationWarning``.

:data:`MOVED` maps each old dotted path to the module that now holds its code. A finder on
``sys.meta_path`` (:class:`MovedModuleFinder`, installed once by ``import hf_lmobj``) answers those
names only: importing an old path warns, naming the new one, and binds the old name to the new
module itself, the same object in ``sys.modules``, so ``isinstance``, pickles and monkeypatching see
one module whichever path a caller used. Every other name goes to the ordinary finders.

Example:
    >>> import importlib, warnings
    >>> MOVED["hf_lmobj.trainer.muon"]
    'hf_lmobj.optim.muon'
    >>> with warnings.catch_warnings():  # the first import of an old path warns: "hf_lmobj.trainer.muon moved to ..."
    ...     warnings.simplefilter("ignore", DeprecationWarning)
    ...     old = importlib.import_module("hf_lmobj.trainer.muon")
    >>> old is importlib.import_module("hf_lmobj.optim.muon")
    True
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import os
import sys
import types
import warnings

__all__ = ["MOVED", "MovedModuleFinder", "install"]

#: Old dotted path -> its new home (issue 28: shared kernels get public homes, one concept per package).
MOVED: dict[str, str] = {
    # models: the auxiliary-objective models, out of the trainer
    "hf_lmobj.trainer.mtp": "hf_lmobj.models.mtp",
    "hf_lmobj.trainer.mtp_blocks": "hf_lmobj.models.mtp_blocks",
    "hf_lmobj.trainer.mtp_targets": "hf_lmobj.models.mtp_targets",
    "hf_lmobj.trainer.electra": "hf_lmobj.models.electra",
    "hf_lmobj.trainer.electra_loss": "hf_lmobj.models.electra_loss",
    "hf_lmobj.trainer.auxiliary_model": "hf_lmobj.models.auxiliary_model",
    # optim
    "hf_lmobj.trainer.muon": "hf_lmobj.optim.muon",
    # fim: fill-in-the-middle from training data to prompts and their evaluation
    "hf_lmobj.collators.fim_format": "hf_lmobj.fim.format",
    "hf_lmobj.collators.fim_transform": "hf_lmobj.fim.transform",
    "hf_lmobj.collators.fim": "hf_lmobj.fim.collator",
    "hf_lmobj.generation.fim_prompting": "hf_lmobj.fim.prompting",
    "hf_lmobj.generation.token_healing": "hf_lmobj.fim.healing",
    "hf_lmobj.metrics.infilling": "hf_lmobj.fim.evaluation",
    "hf_lmobj.metrics.infilling_report": "hf_lmobj.fim.report",
    # packing: collators/packing.py held two things, now packing.bins and packing.masks; the package has both
    "hf_lmobj.collators.packing": "hf_lmobj.packing",
    "hf_lmobj.collators.rows": "hf_lmobj.packing.rows",
    "hf_lmobj.collators.dataset_packing": "hf_lmobj.packing.dataset",
    "hf_lmobj.collators.document_pieces": "hf_lmobj.packing.pieces",
    # collators: named by the objective; the feature checks are public (the FIM collator uses them)
    "hf_lmobj.collators.bart": "hf_lmobj.collators.text_infilling",
    "hf_lmobj.collators._features": "hf_lmobj.collators.features",
    # what only the recipes' cards used moved to them (the objective's card facts are the registry's)
    "hf_lmobj.card_data": "hf_lmobj.cards.data",
    # what any training script can use left the recipes for the library (thin recipes)
    "hf_lmobj.recipes.runtime.config_parsing": "hf_lmobj.config.parsing",
    "hf_lmobj.recipes.runtime.config_files": "hf_lmobj.config.files",
    "hf_lmobj.recipes.runtime.config_names": "hf_lmobj.config.names",
    "hf_lmobj.recipes.runtime.config_values": "hf_lmobj.config.values",
    "hf_lmobj.recipes.runtime.cpu_threads": "hf_lmobj.trainer.cpu_threads",
    "hf_lmobj.recipes.runtime.time_budget": "hf_lmobj.trainer.time_budget",
    "hf_lmobj.recipes.runtime.resume": "hf_lmobj.trainer.resume",
    "hf_lmobj.recipes.runtime.optimizers": "hf_lmobj.optim.arguments",
    "hf_lmobj.recipes.report.cards": "hf_lmobj.cards.writer",
    "hf_lmobj.recipes.report.card_data": "hf_lmobj.cards.data",
    "hf_lmobj.recipes.report.ngram": "hf_lmobj.baselines.ngram",
    "hf_lmobj.recipes.report.compression": "hf_lmobj.baselines.compression",
}

#: Files between an ``import`` statement and the warning besides importlib's frozen bootstrap: this one, import_module's.
_IMPORT_MACHINERY = (os.path.abspath(__file__), os.path.abspath(importlib.__file__))


def _importer_stacklevel() -> int:
    """The ``stacklevel`` that points a warning raised by the caller at the ``import`` statement itself.

    ``warnings.warn`` already passes over importlib's bootstrap frames when it counts levels, so only
    the other frames of the import machinery are counted here.
    """
    frame, level = sys._getframe(1), 1  # the caller, which calls warnings.warn
    while frame is not None and frame.f_code.co_filename.startswith(_IMPORT_MACHINERY):
        frame = frame.f_back
        while (
            frame is not None and "importlib" in frame.f_code.co_filename and "_bootstrap" in frame.f_code.co_filename
        ):
            frame = frame.f_back  # warnings.warn skips these without counting them
        level += 1
    return level


class _AliasLoader(importlib.abc.Loader):
    """Loads an old path as its new module: ``sys.modules[old]`` becomes the new module object itself."""

    def __init__(self, new: str) -> None:
        self.new = new

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None  # a throwaway module: exec_module puts the real one in its place

    def exec_module(self, module: types.ModuleType) -> None:
        old = module.__name__
        warnings.warn(
            f"{old} moved to {self.new}; import it from there ({old} goes away in the next release)",
            DeprecationWarning,
            stacklevel=_importer_stacklevel(),
        )
        # The import system returns whatever sys.modules holds under the old name once this returns.
        sys.modules[old] = importlib.import_module(self.new)


class MovedModuleFinder(importlib.abc.MetaPathFinder):
    """Finds the old paths of :data:`MOVED` (and nothing else) and loads each as its new module."""

    def find_spec(self, fullname: str, path=None, target=None) -> importlib.machinery.ModuleSpec | None:
        new = MOVED.get(fullname)
        return None if new is None else importlib.machinery.ModuleSpec(fullname, _AliasLoader(new))


def install() -> MovedModuleFinder:
    """Put the finder first on ``sys.meta_path`` unless one is there already (idempotent); return it."""
    for finder in sys.meta_path:
        if type(finder).__name__ == MovedModuleFinder.__name__ and type(finder).__module__ == __name__:
            return finder
    finder = MovedModuleFinder()
    sys.meta_path.insert(0, finder)
    return finder


install()  # on import: ``import hf_lmobj`` imports this module before any other of its own

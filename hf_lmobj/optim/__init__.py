"""Optimizers for ``transformers.Trainer``: :mod:`.muon` (``MuonAdamW``: Muon for a transformer's hidden
matrices, AdamW for the rest, one optimizer through the Trainer's optimizer-factory hook) and :mod:`.arguments` (``OptimizerArguments``:
the Trainer's optimizer or Muon + AdamW, chosen in a config section).

Example:
    >>> from torch import nn
    >>> from hf_lmobj.optim import MuonAdamW, muon_param_groups
    >>> model = nn.Sequential(nn.Embedding(8, 4), nn.Linear(4, 4), nn.Linear(4, 8))
    >>> optimizer = MuonAdamW(muon_param_groups(model, weight_decay=0.1), lr=1e-3)
    >>> sorted(group["use_muon"] for group in optimizer.param_groups)
    [False, False, True]
"""

from typing import TYPE_CHECKING

from hf_lmobj.lazy_faces import lazy_face

if TYPE_CHECKING:
    from hf_lmobj.optim.arguments import OptimizerArguments, optimizer_cls_and_kwargs
    from hf_lmobj.optim.muon import MuonAdamW, MuonAdamWFactory, muon_param_groups, orthogonalize

__all__ = [
    "MuonAdamW",
    "MuonAdamWFactory",
    "muon_param_groups",
    "orthogonalize",
    "OptimizerArguments",
    "optimizer_cls_and_kwargs",
]

__getattr__, __dir__ = lazy_face(__name__, __all__)

"""Jinja templates of the model cards the recipes write (``causal.md``, ``masked.md``, ``span.md``, ``classifier.md``), one per ``ObjectiveSpec.template``.

Shipped as package data of ``hf_lmobj.model_cards``; read them with
``importlib.resources.files("hf_lmobj.model_cards")``.
"""

__all__ = []

"""Jinja templates of the model cards the recipes write (``clm.md``, ``mlm.md``, ``span.md``, ...).

Shipped as package data of ``hf_lmobj.model_cards``; read them with
``importlib.resources.files("hf_lmobj.model_cards")``.
"""

__all__ = []

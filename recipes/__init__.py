"""The recipes, shipped as ``hf_lmobj.recipes``: ``accelerate launch -m hf_lmobj.recipes.pretrain --config causal/demo``.

Each recipe is a script (``recipes/<name>.py`` in a clone) and a module of the installed package;
``configs/<objective>/*.yaml`` and ``accelerate_configs/*.yaml`` ship beside them as package data.
The recipes need the ``[recipes]`` extra (peft, jinja2, matplotlib).
"""

__all__ = []

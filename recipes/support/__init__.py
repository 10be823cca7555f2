"""What the recipes share: data preparation, tiny models, argument parsing, cards, reports.

Not part of the core library: the core (``hf_lmobj`` minus ``hf_lmobj.recipes``) never imports it.
"""

__all__ = []

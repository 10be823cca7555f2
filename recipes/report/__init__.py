"""What the pre-training recipe reports: its arguments, the report itself, the infilling comparison.

Recipe code, not library code: the core (``hf_lmobj`` minus ``hf_lmobj.recipes``) never imports it.
Cards and baselines are library parts any script can use: :mod:`hf_lmobj.cards`, :mod:`hf_lmobj.baselines`.
"""

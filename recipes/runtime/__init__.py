"""How a recipe runs, on top of the library: phase timer, the run's state, checks of its arguments, saving.

Recipe code, not library code: the core (``hf_lmobj`` minus ``hf_lmobj.recipes``) never imports it.
What any training script can use (config parsing, CPU threads, the time budget, resume, the
optimizer choice) is in the library: :mod:`hf_lmobj.config`, :mod:`hf_lmobj.trainer`, :mod:`hf_lmobj.optim`.
"""

"""How the recipes run: config parsing, CPU threads, time budget, phase timer, resume, checks, saving, optimizers.

Recipe code, not library code: the core (``hf_lmobj`` minus ``hf_lmobj.recipes``) never imports it.
"""

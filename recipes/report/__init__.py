"""What the recipes report: model cards, n-gram and compressor baselines, the pre-training report, infilling.

Recipe code, not library code: the core (``hf_lmobj`` minus ``hf_lmobj.recipes``) never imports it.
"""

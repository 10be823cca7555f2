"""The models the recipes build: small stock architectures per objective and the auxiliary-objective wrappers.

Recipe code, not library code: the core (``hf_lmobj`` minus ``hf_lmobj.recipes``) never imports it.
"""

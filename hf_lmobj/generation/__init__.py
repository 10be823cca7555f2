"""Decoding helpers: fill-in-the-middle prompts for ``generate()`` (:mod:`.fim_prompting`)."""

"""hf_lmobj: causal, masked and span-corruption objectives for the Hugging Face stack."""

__version__ = "0.1.0"

__all__: list[str] = []

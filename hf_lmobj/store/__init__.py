"""Token stores: a corpus tokenized once into memory-mapped token files and a document index, read in O(1).

* :mod:`.token_store` (:class:`TokenStore`): open, check and read a store (also nanoGPT's and Megatron's
  token files, :mod:`.foreign`); its files (:mod:`.files`, :mod:`.held_out_files`) and tokenizer
  (:mod:`.tokenizer`, :mod:`.tokenizer_fingerprint`);
* writing one: token ids in (:mod:`.write`, :func:`write_token_store`), text in (:mod:`.tokenize_text`,
  :func:`tokenize_to_token_store`), both through :mod:`.writer` (complete folders, renamed into place).

A store is one source of the pipeline (:mod:`hf_lmobj.data`), which reads it as it reads text.
"""

from typing import TYPE_CHECKING

from hf_lmobj.lazy_faces import lazy_face

if TYPE_CHECKING:
    from hf_lmobj.store.token_store import TokenStore
    from hf_lmobj.store.tokenize_text import tokenize_to_token_store
    from hf_lmobj.store.write import write_token_store

__all__ = ["TokenStore", "tokenize_to_token_store", "write_token_store"]

__getattr__, __dir__ = lazy_face(__name__, __all__)

"""``--config NAME`` plus command-line overrides for argument dataclasses: the recipes' parser, usable by any script.

:mod:`.parsing` (``parse_args_with_config``, TRL's ``TrlParser`` analogue on ``HfArgumentParser``),
:mod:`.files` (a YAML file, its ``base:`` chain and sections), :mod:`.values` (each YAML value
checked against its field's type), :mod:`.names` (the configs shipped with the recipes by name).
It lives in the library so that a user's own training script takes the same configs and flags.

Example:
    >>> from hf_lmobj.config import resolve_config, shipped_configs
    >>> "causal/demo" in shipped_configs(), resolve_config("causal/demo").name
    (True, 'demo.yaml')
"""

from typing import TYPE_CHECKING

from hf_lmobj.lazy_faces import lazy_face

if TYPE_CHECKING:
    from hf_lmobj.config.files import config_sections, load_yaml_config
    from hf_lmobj.config.names import resolve_config, shipped_configs
    from hf_lmobj.config.parsing import cpu_aware_argv, parse_args_with_config
    from hf_lmobj.config.values import check_config_values

__all__ = [
    "parse_args_with_config",
    "cpu_aware_argv",
    "load_yaml_config",
    "config_sections",
    "check_config_values",
    "resolve_config",
    "shipped_configs",
]

__getattr__, __dir__ = lazy_face(__name__, __all__)

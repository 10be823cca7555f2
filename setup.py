"""The wheel's packages, found rather than listed (the rest of the metadata is in pyproject.toml).

The repository keeps ``recipes/`` and ``model_cards/`` at the top level; the wheel ships them inside the
package as ``hf_lmobj.recipes`` and ``hf_lmobj.model_cards``, so that an installed package runs every
recipe. ``[tool.setuptools.packages.find]`` cannot rename a found folder, hence this file: every folder
under each root (``__pycache__`` aside) is a package of the wheel, named under the root's package.
"""

from setuptools import find_namespace_packages, setup

#: Package name -> the folder that holds it in the repository.
ROOTS = {"hf_lmobj": "hf_lmobj", "hf_lmobj.recipes": "recipes", "hf_lmobj.model_cards": "model_cards"}
#: Files other than modules that ship beside them: recipe configs, metric cards and requirements, card templates.
DATA = ["*.yaml", "*.md", "*.txt"]


def _packages(package: str, folder: str) -> list[str]:
    found = find_namespace_packages(where=folder, exclude=["__pycache__", "*.__pycache__"])
    return [package, *(f"{package}.{name}" for name in found)]


packages = [name for package, folder in ROOTS.items() for name in _packages(package, folder)]
setup(
    packages=packages,
    package_dir={package: folder for package, folder in ROOTS.items() if package != folder},
    package_data={package: DATA for package in packages},
)

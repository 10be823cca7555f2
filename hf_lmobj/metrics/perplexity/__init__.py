"""Package marker so pytest and setuptools see this Space folder; not part of the Space (export_space leaves it out)."""

__all__ = []

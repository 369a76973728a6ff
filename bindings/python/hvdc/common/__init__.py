"""hvdc.common: the framework-independent part of the bindings (see hvdc/__init__.py)."""

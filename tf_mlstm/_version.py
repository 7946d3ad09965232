"""The package version, in one place: setup.py reads it, `tf_mlstm.__version__` is it."""

__version__ = "0.1.0"

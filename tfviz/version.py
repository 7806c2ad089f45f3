"""The tfviz version, written into every checkpoint's metadata."""
__version__ = "0.1.0"

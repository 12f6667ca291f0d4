"""nmt-serve: the HTTP service around the translation model in `model/`."""

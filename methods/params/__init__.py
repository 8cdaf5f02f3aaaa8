"""The built-in methods' declarations: each one's parameters and the facts the pipeline reads
before any trial, in one torch-free module per method (`methods/declaration.py` says why). The
algorithm itself is in `methods/<name>.py`, whose `Method` subclasses the declaration here."""

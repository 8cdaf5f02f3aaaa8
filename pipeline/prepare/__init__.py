"""Stage 1, prepare: data sources, tokenizers, the tokenized Arrow cache, model references
(`pkg:`, hub names, folders) and the task metrics. Imports only the shared contracts."""

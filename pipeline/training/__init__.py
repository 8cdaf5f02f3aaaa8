"""One trial in one process: the loop, the DDP/DeepSpeed engine, batching, evaluation, the
teacher's fine-tuning, export and its verification. Knows nothing of Ray or MLflow."""

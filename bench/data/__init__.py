"""Datasets and their loaders: the bilingual set and the off-topic prompts (JSON lines beside this file),
LoCoMo (read in place from ``../shared/datasets/``), and synthetic memories generated on the spot."""

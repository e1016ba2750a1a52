"""Training of decision models (installed as ``kevlike.training``): LoRA + pointer head on the same
encode/pack/mask path as serving (DESIGN.md §8). The training loop lands with the training issue."""

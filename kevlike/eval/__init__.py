"""Evaluation suite (installed as ``kevlike.eval``): metrics and structural probes (DESIGN.md §12).
The suite lands with the calibration/evaluation issue."""

"""Accuracy of the embedded demo model on its dev sets, and the oracles that bound it."""

"""Hadar: heterogeneity-aware GPU scheduling."""

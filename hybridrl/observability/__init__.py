"""Observability: driver side (monitor, metrics, breakdown, trackers, report, trace) and worker side (spans, peaks, utilisation)."""

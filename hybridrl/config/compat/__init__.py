"""Compatibility tables for configs written for other frameworks."""

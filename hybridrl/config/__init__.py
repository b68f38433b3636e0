"""Typed configuration: schema (dataclasses and enums), loading, validation, pools."""

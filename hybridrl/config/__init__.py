"""Typed configuration: schema (dataclasses and enums), single-value checks, loading. Imports no domain package;
the checks that need one (registries, pools, layouts, files) are ``hybridrl.preflight``'s."""

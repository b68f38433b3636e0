"""verl compatibility: verl's config keys and defaults (``defaults.yaml``) and the rules for each (``keys.py``)."""
